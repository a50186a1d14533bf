// The lowering's working state, shared by the files that lower one family of op kinds each.
#pragma once

#include <algorithm>
#include <array>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <utility>
#include <vector>

#include "compile/lower/lowering.h"

namespace tsp::lower::detail {

/// An instruction on a unit with a repeat count and interval.
isa::Instruction makeInst(int unit, isa::Opcode op, std::int64_t repeat, int interval = 1);
/// The VXM function of an elementwise op kind (one of the same cost where the ALU has none of its own).
isa::VxmFunc funcOf(ir::OpKind kind);
/// The immediates (FunctionalOperand::immediate, immediate2) of an elementwise op's VXM function:
/// LeakyRelu's and Elu's alpha, HardSigmoid's alpha and beta; nullopt for the others.
std::optional<std::pair<float, float>> vxmImmediates(const ir::Op& op);
/// Whether funcOf(kind) computes the op's values (functional mode) or only stands in for its cost.
bool computesValues(ir::OpKind kind);
/// Whether the MXM and the named accumulators compute on values of this type (FP16 or INT8, the
/// storage types; INT32, FP32, BF16 and bool tensors are computed by elementwise ops only).
bool storageTypeComputes(ir::DType type);

/// A tensor's SRAM pieces with the tasks that write and read each of them. A tile's rows are cut
/// into segments of at most `segmentRows` rows, each on its own MEM slice; piece = tile x segments + segment.
struct TensorState {
  isa::TensorPlacement placement;
  std::vector<alloc::Block> blocks;                       ///< per piece
  std::vector<std::vector<std::pair<int, int>>> writers;  ///< per piece: (task, step)
  /// Per piece, beside writers: the rows [first, end) each writer wrote (a read waits for its rows' writers only).
  std::vector<std::vector<std::pair<std::int64_t, std::int64_t>>> writerRows;
  std::vector<std::vector<std::pair<int, int>>> readers;  ///< per piece: (task, step) of every read
  bool pinned = false;                                    ///< never freed (resident, sent, graph output)

  std::int64_t segmentRows() const {
    return placement.segmentRows > 0 ? placement.segmentRows : std::max<std::int64_t>(1, placement.rows);
  }
  int segments() const { return static_cast<int>(ceilDiv(placement.rows, segmentRows())); }
  /// The piece holding row `row` of tile `tile` (of the first copy).
  int piece(int tile, std::int64_t row) const { return tile * segments() + static_cast<int>(row / segmentRows()); }
  /// The same piece in copy `replica` (taken modulo the copies).
  int pieceOf(int tile, std::int64_t row, int replica) const {
    return piece(tile, row) + (replica % placement.replicas) * placement.tiles * segments();
  }
};

/// The 2-D window of a Conv or pooling op: input [N, C, H, W], output [N, C', Ho, Wo].
struct Window {
  std::int64_t n = 1, h = 1, w = 1, ho = 1, wo = 1;
  std::int64_t kh = 1, kw = 1, sh = 1, sw = 1, dh = 1, dw = 1, pt = 0, pl = 0;
  std::int64_t taps() const { return kh * kw; }
  /// Every output pixel reads input pixel p + a constant per tap: one stream over all pixels.
  bool unitStride() const { return sh == 1 && sw == 1 && ho == h && wo == w; }
  /// Every tap of every output pixel lies inside the input (no padding).
  bool inside() const {
    return pt == 0 && pl == 0 && ho == (h - dh * (kh - 1) - 1) / sh + 1 && wo == (w - dw * (kw - 1) - 1) / sw + 1;
  }
};

/// Lowers one shard op by op; the families live in lowering.cpp (MXM, VXM, SXM, C2C),
/// spatial_lowering.cpp (Conv, pooling, BatchNorm) and movement_lowering.cpp (Concat, Split, Slice,
/// Gather, reductions, Where).
class Lowering {
 public:
  Lowering(const topology::ChipSpec& chip, const ir::Graph& graph, LoweredShard& out);

  /// Places a tensor; with `copies` > 1 every tile segment is stored that many times, on slices of
  /// one hemisphere (one stream value written by all of them), for tensors whose readers read each
  /// row many times (readCopies).
  Status place(ir::TensorId tensor, bool resident, const alloc::SliceSet& avoid = {}, int copies = 1);
  /// Allocates the pieces of a tensor whose geometry `st` gives (every copy, tile and segment).
  Status allocatePieces(TensorState& st, const alloc::SliceSet& avoid);
  /// Do the copies of every piece lie on distinct slices of one hemisphere (one stream can write them)?
  bool copiesOnOneSide(const TensorState& st) const;
  /// Marks a tensor that crosses a C2C link: it is stored unspread (see c2cTensors_).
  void markC2c(ir::TensorId tensor) { c2cTensors_.insert(tensor); }
  /// ShardInterface::sliceFree: received tiles go on slices free by their arrival when some are.
  void setSliceFree(std::vector<Cycle> sliceFree) { sliceFree_ = std::move(sliceFree); }
  /// Marks a resident leaf that a value this shard computes replaces (ir::Graph::markOverwrites):
  /// its space is freed once its last reader here has been lowered, as an in-place update's.
  void markOverwritten(ir::TensorId leaf) { overwritten_.insert(leaf); }
  /// Finds the Transposes of 2-D resident weights whose every user among `ops` is a matmul reading
  /// them as its weights (a tied head's Transpose of the embedding): they are not lowered, and their
  /// matmuls install the weights' own rows as columns (the transB install), so that no transposed
  /// copy is made or held. Not when the Transpose's output leaves the shard (`keep`).
  void findTransposedWeights(const std::vector<ir::OpId>& ops, const std::set<ir::TensorId>& keep);
  /// Whether an MXM installs `tensor` as weights stored [N, K] (transposedWeights).
  bool readTransposed(ir::TensorId tensor) const;
  /// One tile's receive tasks (one per segment; `task` is the first); lowerShard makes them in
  /// arrival order per port.
  Status receive(const ReceivePlan& plan, int tile, int& task);
  Status lowerOp(ir::OpId op, const std::vector<ir::OpId>& ops, size_t position, int& consumed);
  Status send(const SendPlan& plan, std::vector<int>& tasks);
  void freeDead(const std::vector<ir::OpId>& ops, size_t done, const std::set<ir::TensorId>& keep);
  void finish();
  bool placed(ir::TensorId t) const { return tensors_.count(t) > 0; }
  alloc::SliceSet slicesOf(ir::TensorId tensor) const;
  /// Rows x tiles of a tensor in this graph's storage layout (tensorGeometry).
  std::pair<std::int64_t, int> geometry(ir::TensorId tensor) const;
  /// The first read or write made so far that runs past the end of its segment, or empty: such a
  /// program would touch another tensor's addresses (lowerShard fails with an internal error).
  const std::string& crossing() const { return crossing_; }

 private:
  using Step = schedule::Step;
  // A read of rows [row0, row0 + rows) of one tile: what a step reads, for dependences.
  struct Access {
    ir::TensorId tensor = -1;
    int tile = 0;
    std::int64_t row0 = 0, rows = 0;
    int step = 0;
    int replica = 0;  ///< which copy of the tensor (a feature map written twice for its many tap reads)
  };
  // One MXM job: output rows in blocks, K tiles streamed from a source, an optional epilogue.
  struct MxmJob {
    const ir::Op* op = nullptr;
    ir::TensorId weights = -1, out = -1, bias = -1;
    ir::TensorId residual = -1;  ///< added after the bias (a ResNet shortcut), same rows as the output
    /// The maps the epilogue writes or reads row for row, whose segments may differ: a row block
    /// stays inside a segment of each.
    std::vector<ir::TensorId> rowMaps() const {
      return residual >= 0 ? std::vector<ir::TensorId>{out, residual} : std::vector<ir::TensorId>{out};
    }
    ir::OpKind activation = ir::OpKind::kIdentity;
    int kTiles = 0;
    std::int64_t macs = 0;
    /// Row blocks (batch, first output row, rows), each inside one segment of the output and source.
    std::vector<std::array<std::int64_t, 3>> blocks;
    /// The read step of K tile k for an output row block and what it reads.
    std::function<std::pair<Step, Access>(int k, const std::array<std::int64_t, 3>& block)> source;
    /// First weight row of K tile k in batch b.
    std::function<std::int64_t(std::int64_t batch, int k)> weightRow;
    /// Weight rows K tile k has (functional mode: the plane's rows past them are zero).
    std::function<std::int64_t(int k)> weightRows;
    /// The compute's values are not x W (+ bias, + residual): a Gemm transpose or scale, a folded
    /// BatchNormalization, a window read that is not the tap's pixels. Timed alike, not computed.
    bool timingOnly = false;
    /// The bias add's values are not computed (its lanes or rows do not line up with the output's).
    bool biasTimingOnly = false;
    /// The bias has one value (splatted over the lanes); the epilogue computes alpha x (x W) + beta x bias.
    bool biasSplat = false;
    float alpha = 1.0f, beta = 1.0f;
    /// The weights are stored transposed ([N, K], Gemm transB): tile (k, n) is rows n x lanes on of
    /// column tile k, installed as columns.
    bool transposedWeights = false;
    /// The operand of K tile k's compute for a block (-1: none): a window tap's realignment.
    std::function<int(int k, const std::array<std::int64_t, 3>& block)> window;
    /// Whether output tile n needs K tile k (null: every K tile): a grouped Conv's block-diagonal
    /// weights are zero off its groups, and their K tiles are not streamed.
    std::function<bool(int k, int n)> kUsed;
    /// The K tiles output tile n streams, in order.
    std::vector<int> kTilesOf(int n) const {
      std::vector<int> ks;
      for (int k = 0; k < kTiles; ++k)
        if (!kUsed || kUsed(k, n)) ks.push_back(k);
      return ks;
    }
    /// Each row block (or group of short blocks hiding an install) stays a plane run of its own:
    /// blockGroups does not regroup them into equal groups.
    bool blockRuns = false;
    /// For a source read of scratch (Access tensor -1): records the reading task and returns the
    /// (task, step) pairs that wrote the scratch.
    std::function<std::vector<std::pair<int, int>>(const Access& read, int task)> scratchSource;
  };
  // The last pass of a chain of tap passes: (task, its write step).
  struct TapChain {
    int task = -1, writeStep = -1;
  };

  Status lowerFamily(const ir::Op& op, const std::vector<ir::OpId>& ops, size_t position, int& consumed);
  Status lowerMatMul(const ir::Op& op, const std::vector<ir::OpId>& ops, size_t position, int& consumed);
  Status lowerMxm(const MxmJob& job);
  // The groups [begin, end) of job.blocks[first, last) (one batch) that share an installed weight tile.
  std::vector<std::pair<size_t, size_t>> blockGroups(const MxmJob& job, size_t first, size_t last, int nTiles) const;
  Status lowerElementwise(const ir::Op& op);
  // read operands[0] -> ALU funcs[0] (with operands[1]) -> ... -> write, per tile and row piece.
  // With valuesKnown false the ALU steps only stand in for the op's cost (functional mode refuses them).
  Status lowerVxmChain(const ir::Op& op, const std::vector<ir::TensorId>& operands,
                       const std::vector<isa::VxmFunc>& funcs, bool valuesKnown);
  // Output tiles [outTile0, +outTiles) x rows [outRow0, +outRows) through an SXM: from input tile
  // inTile0 + i and rows inRow0 + j (mod its tiles and rows), or, walking, from the input's vectors
  // in order starting at row inRow0 of tile inTile0.
  void copyVectors(const ir::Op& op, ir::TensorId in, ir::TensorId out, int outTile0, int outTiles,
                   std::int64_t outRow0, std::int64_t outRows, int inTile0, std::int64_t inRow0, bool walk = false,
                   isa::SxmFunc func = isa::SxmFunc::kUnspecified, int operand = -1, int map = -1);
  // The element map (isa::ElementMap) of a data-movement op's output `out` (Transpose, Reshape and its
  // kin, Expand, Gather, Slice, Concat and Split along any axis); -1 when the op's tensors are not
  // stored row-major in their shape (channels-last maps) or its parameters are not constants.
  // copyVectors with the map re-forms every vector from the map's sources: each piece waits for
  // the writers of the source rows it takes, and a reuse of their space for it.
  int elementMap(const ir::Op& op, ir::TensorId out);
  // The element map of `in` broadcast (numpy's rules) to the shape of `out`, over both storage
  // orders; -1 when it does not broadcast or their element widths differ.
  int broadcastMap(ir::TensorId in, ir::TensorId out);
  // Re-expresses a map built over the shapes of `in` (its first source) and `out` over their storage
  // orders (channels-last maps), records it with the tensors it reads, and returns its index.
  int addElementMap(isa::ElementMap map, ir::TensorId in, ir::TensorId out, std::vector<ir::TensorId> reads);
  // The source rows (per source tile) that output rows [row0, +rows) of `tile` of map's output take,
  // as reads of the permute's step; a Gather's whole table and indices.
  void permuteReads(int map, ir::TensorId out, int tile, std::int64_t row0, std::int64_t rows,
                    std::vector<Access>& reads) const;
  Status lowerNormalization(const ir::Op& op);
  // A pass of per-row statistics kept in the ALU (Softmax's exp-sum, LayerNorm's moments, a loss's
  // log-sum-exp): one task per tile and row piece of `in`, reading it through `func`.
  struct RowStatistics {
    int task = -1;
    std::int64_t row0 = 0, rows = 0;
  };
  std::vector<RowStatistics> statisticsPass(const ir::Op& op, ir::TensorId in, isa::VxmFunc func);
  // Task `task` starts after the statistics of rows [row0, row0 + rows) (rows < 0: of every row).
  void waitForStatistics(const std::vector<RowStatistics>& stats, int task, std::int64_t row0, std::int64_t rows);
  // Training kernels (training_lowering.cpp): the loss, its gradient, the embedding's scatter-add.
  Status lowerLoss(const ir::Op& op);
  Status lowerLossGrad(const ir::Op& op);
  Status lowerGatherGrad(const ir::Op& op);
  Status lowerDataMovement(const ir::Op& op);
  Status lowerConv(const ir::Op& op, const std::vector<ir::OpId>& ops, size_t position, int& consumed);
  Status lowerBatchNorm(const ir::Op& op);
  // Whether a graph leaf is read by `user` alone (its values may be replaced by folded ones).
  bool foldsAlone(ir::TensorId tensor, const ir::Op& user) const;
  // Records that `tensor`'s image holds BatchNormalization `bn` folded (kWeights: into `weights`).
  void recordFold(const ir::Op& bn, ir::TensorId tensor, isa::WeightFold::Kind kind, ir::TensorId weights);
  Status lowerPool(const ir::Op& op);
  Status lowerPackedConv(MxmJob& job, const Window& win, ir::TensorId in, std::int64_t tapsPerVector, std::int64_t tm);
  // Passes over one block of output pixels for taps [tap0, tap1) of input tile `tile`, combining each
  // with the previous partial; with shiftLanes every pass after the first moves its rows to its
  // tap's lanes on the SXM (packing taps into one vector).
  // With tapWeights (a depthwise Conv's [C, 1, kh, kw] weights), every tap is first multiplied by its
  // weight row; with bias, the last pass adds the bias row.
  // With `computes`, every tap's rows are realigned (padding `fill`) through a window: a shifted
  // tap's on its SXM shift, an unshifted one's as the ALU instruction's src (or src2) operand.
  // A nonzero `tapScale` is the immediate of kScaleAdd steps (an average pool: the first tap times
  // tapScale, then tap x tapScale + partial).
  Expected<TapChain> tapPasses(const std::string& name, const Window& win, ir::TensorId in, int tile,
                               const std::array<std::int64_t, 3>& block, std::int64_t tap0, std::int64_t tap1,
                               bool shiftLanes, isa::VxmFunc first, isa::VxmFunc combine, bool computes, float fill,
                               const std::function<Step(int, int)>& finalWrite, const std::vector<Access>& finalWrites,
                               const alloc::SliceSet& avoid, float tapScale = 0.0f,
                               isa::VxmFunc finish = isa::VxmFunc::kNone, ir::TensorId tapWeights = -1,
                               ir::TensorId bias = -1);
  // A depthwise Conv (group = channels = filters): per tap, the window's pixels times the tap's
  // weight row on the VXM, summed over the taps (tapPasses with tapWeights), plus the bias.
  Status lowerDepthwiseConv(const ir::Op& op);
  // The SXM unit for a gather pass's `rows` shifted rows read on MEM unit `readUnit` (the index-th
  // shift of its chain picks among the hemisphere's units), counted in sxmRows_.
  int gatherShiftUnit(int readUnit, std::int64_t rows, int index);
  // Is `relu` (a ReLU's output) read by one max-pool alone and not a graph output? Then the ReLU
  // is the pool's last ALU step instead of its producer's (they commute; the pool has 4x fewer rows).
  bool reluAfterPool(ir::TensorId relu) const;
  Status lowerReduction(const ir::Op& op);
  Status lowerWhere(const ir::Op& op);
  Status lowerCopy(const ir::Op& op);
  // A Concat part joining a one-tile output off tile boundaries (its lane-shift operand given).
  void mergeLanes(const ir::Op& op, ir::TensorId part, ir::TensorId whole, int operand);

  // Records the first read or write that runs past the end of its segment (crossing()).
  void noteCrossing(const char* access, const TensorState& st, std::int64_t row0, std::int64_t rows) const;
  // A read step of rows [row0, row0+rows) of tile `tile` (inside one segment); a broadcast reads row 0.
  Step readStep(ir::TensorId tensor, int tile, std::int64_t row0, std::int64_t rows, bool broadcast,
                int replica = 0) const;
  // A write step of rows [row0, row0+rows) of tile `tile` (inside one segment), fed by step `producer`.
  Step writeStep(ir::TensorId tensor, int tile, std::int64_t row0, std::int64_t rows, int producer,
                 int replica = 0) const;
  // Adds the task and records its reads and writes (the Access steps index into the task).
  int addTask(schedule::Task task, const std::vector<Access>& reads, const std::vector<Access>& writes);
  void dependOnWriters(const Access& read, int task);
  void noteWriter(const Access& write, int task);
  void noteReader(const Access& read, int task);
  // Splits [begin, end) at the segment boundaries of the given tensors (those with `rows` rows).
  std::vector<std::pair<std::int64_t, std::int64_t>> rowPieces(std::int64_t begin, std::int64_t end,
                                                               const std::vector<ir::TensorId>& tensors) const;
  // Slices the last K tile of an MXM output block touches besides its input: output, bias, residual.
  alloc::SliceSet tailSlicesOf(const MxmJob& job, int tile, std::int64_t row0, int replica) const;
  // The piece (copy) of a side operand the epilogue of an output block reads, off the `busy` slices.
  int sidePiece(const MxmJob& job, ir::TensorId side, int tile, std::int64_t row0, int replica,
                const alloc::SliceSet& busy) const;
  // The compute task of K tile k for output tile n and one row block (with the epilogue when last).
  int addMxmCompute(const MxmJob& job, int k, int n, const std::array<std::int64_t, 3>& block, std::int64_t batchRow0,
                    int computeUnit, bool last, int vxm);
  // Output row blocks of a window op (batch 0, first pixel, pixels), inside the segments of the
  // maps of the output's shape it writes or reads row for row (`outs`: the output, a residual), cut
  // so that the rows every tap of a block needs lie in one segment of the input.
  std::vector<std::array<std::int64_t, 3>> windowBlocks(const Window& win, ir::TensorId in,
                                                        const std::vector<ir::TensorId>& outs, std::int64_t tm,
                                                        bool bands = true) const;
  // The output pixels at which a unit-stride window op's blocks are cut so that each tap of a block
  // reads the rows it needs from one segment of the input (none for a strided window).
  std::set<std::int64_t> bandCuts(const Window& win, ir::TensorId in) const;
  // A block cut at `cuts` into pieces of at most tm pixels.
  static std::vector<std::array<std::int64_t, 3>> cutBlock(const std::array<std::int64_t, 3>& block,
                                                           const std::set<std::int64_t>& cuts, std::int64_t tm);
  // The read of one tap (ky, kx) of input tile `tile` for a block of output pixels.
  // With `exact`, whether the rows read are the tap's pixels (no padding taps, no clamping).
  // Reads copy `replica` (modulo the input's copies).
  std::pair<Step, Access> windowRead(const Window& win, ir::TensorId in, int tile,
                                     const std::array<std::int64_t, 3>& block, std::int64_t ky, std::int64_t kx,
                                     bool* exact = nullptr, int replica = 0) const;
  // How many copies a feature map made by an MXM epilogue gets: 2 when every reader is a window op
  // of at least 4 taps (each row read once per tap) and SRAM has room, else 1.
  int readCopies(ir::TensorId tensor) const;
  // The image row length W of a feature map that a window op other than a 1 x 1 unit-stride one
  // reads (its segments then hold whole image rows), directly or behind up to kRowFollowDepth ops
  // that keep the rows (1 x 1 unit-stride Convs, BatchNorm, Add, ReLU), else 1.
  std::int64_t windowRowLength(ir::TensorId tensor, int depth = 0) const;
  static constexpr int kRowFollowDepth = 8;
  // The window of tap (ky, kx) for a block of output pixels whose source is the window read `read`
  // (LoweredShard::windows): the tap's pixels realigned (padding `fill` in `lanes` lanes), lanes
  // moved up by laneShift. Returns its index.
  int addWindow(const Window& win, const std::array<std::int64_t, 3>& block, std::int64_t ky, std::int64_t kx,
                const std::pair<Step, Access>& read, std::int64_t lanes, float fill, std::int64_t laneShift);
  // The operand of an instruction whose source is that window read (addWindow's window as src).
  int windowOperand(const Window& win, const std::array<std::int64_t, 3>& block, std::int64_t ky, std::int64_t kx,
                    const std::pair<Step, Access>& read, std::int64_t lanes, float fill, std::int64_t laneShift);
  // Values per storage row of a tensor: the channels of a channels-last map, else the last dimension.
  std::int64_t storageCols(ir::TensorId tensor) const;
  // A tensor's dimensions in storage order (the rows' dimensions, then the values per row): the
  // shape, or [N, H, W, C] for a channels-last map; and where shape axis `axis` sits in them.
  std::vector<std::int64_t> storageDims(ir::TensorId tensor) const;
  size_t storageAxis(ir::TensorId tensor, std::int64_t axis) const;
  // Records a VXM instruction's operand (LoweredShard::operands) and returns its index.
  int addOperand(const isa::FunctionalOperand& operand);
  // A task reading rows [r0, r0 + n) of `in`'s tile into named accumulator `acc` on the VXM (timed
  // only unless `computes`).
  schedule::Task accumulateTask(std::string name, ir::TensorId in, int acc, int tile, std::int64_t r0, std::int64_t n,
                                bool computes);
  // Records a named accumulator (LoweredShard::accumulators) and returns its id.
  int addAccumulator(const isa::Accumulator& accumulator);
  // Reads and writes of a raw block (scratch), and the write-after-read wait on freed space.
  Step makeReadOf(const alloc::Block& block, std::int64_t rows) const;
  Step makeWriteOf(const alloc::Block& block, std::int64_t rows, int producer) const;
  void waitForFreedReaders(const alloc::Block& block, int task, int step);
  // A scratch block of `rows` addresses off `avoid`, freed again at the end of the op.
  Expected<alloc::Block> scratch(std::int64_t rows, const alloc::SliceSet& avoid);
  // Frees a block whose tensor was read by `readers` and written by `writers` (both (task, step)).
  void releaseScratch(const alloc::Block& block, const std::vector<std::pair<int, int>>& readers,
                      const std::vector<std::pair<int, int>>& writers = {});
  const ir::Op* soleUser(ir::TensorId t, const std::vector<ir::OpId>& ops, size_t at,
                         std::initializer_list<ir::OpKind> kinds) const;

  const topology::ChipSpec& chip_;
  const ir::Graph& graph_;
  LoweredShard& out_;
  schedule::Problem& problem_;
  // Spreading: at most spreadSegments_ segments of at least minSegmentRows_ rows. A conv net's
  // feature maps take up to 16 of 64 rows (a window op reads each input row once per tap); other
  // graphs up to 8 of 128 (tests/bench/compiler_bench.cpp measured the choices).
  int spreadSegments_ = 8;
  // Tensors sent or received over C2C are not spread: a tile crosses as one burst, back to back,
  // which the receiver's release times assume (a tile longer than a slice still goes in segments).
  std::set<ir::TensorId> c2cTensors_;
  std::vector<Cycle> sliceFree_;  // per MEM slice: when an earlier program leaves it (ShardInterface::sliceFree)
  std::set<ir::TensorId> overwritten_;  // resident leaves whose new values this shard computes
  std::int64_t minSegmentRows_ = 128;
  std::set<ir::TensorId> poolRelu_;  // feature maps stored before their ReLU, which their max-pool applies
  mutable std::string crossing_;  // the first access past its segment's end (noteCrossing), or empty
  bool spatial_ = false;  // the graph has convolutions or pooling
  std::vector<bool> channelsLast_;  // per graph tensor: stored channels-last (channelsLastTensors)
  bool channelsLast(ir::TensorId t) const { return t >= 0 && static_cast<size_t>(t) < channelsLast_.size() && channelsLast_[static_cast<size_t>(t)]; }
  std::map<ir::TensorId, TensorState> tensors_;
  std::map<ir::TensorId, ir::TensorId> transposedWeights_;  // a Transpose's output -> the weights it reads
  std::vector<std::vector<ir::TensorId>> mapReads_;  // per element map: the tensors it reads (sources, indices)
  int sideReads_ = 0;
  // The K rows of the matrix a MatMul (or a Gemm without transB) installs the tensor as (0: none).
  std::int64_t mxmWeightRows(ir::TensorId tensor) const;
  // Why the op being lowered is timed without its values (Program::refusals; empty: the op kind's
  // stand-in instruction).
  std::string timingReason_;
  // Scratch copies made for the op being lowered, freed when it is done: (block, its readers).
  std::vector<std::pair<alloc::Block, std::vector<std::pair<int, int>>>> opScratch_;  // broadcast side reads so far: they take the copies of a replicated tensor in turn
  // Readers of freed blocks (writers, for a value nothing read), per MEM slice: a later tensor reusing
  // the space waits for them (WAR, or WAW).
  std::map<int, std::vector<std::pair<alloc::Block, std::vector<std::pair<int, int>>>>> freed_;
  std::map<int, int> lastReceive_;  // per port: the last receive task (receives consume in arrival order)
  std::map<int, int> lastSend_;     // per port: the last send task (tiles leave in tile order)
  std::map<int, int> lastSendStep_; // per port: that task's last C2C send step
  std::int64_t sxmRows_[2] = {0, 0};  // rows the gather passes shifted on the west and the east SXM
  std::vector<Cycle> planeLoad_;    // per MXM plane: compute cycles handed to it so far
  std::vector<std::pair<int, int>> planeLast_;  // per plane: last (install task, compute task)
};

}  // namespace tsp::lower::detail
