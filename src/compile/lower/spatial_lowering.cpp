// Lowering of convolutions (implicit GEMM on the MXM), pooling and batch normalisation; the channels-last layout.
#include <algorithm>
#include <cassert>
#include <map>
#include <set>

#include <fmt/format.h>

#include "compile/ir/op_table.h"
#include "compile/lower/lowering_internal.h"

namespace tsp::lower {

using isa::Opcode;
using schedule::Step;
using schedule::Task;
using topology::UnitKind;

namespace {

bool isSpatialOp(ir::OpKind kind) {
  return kind == ir::OpKind::kConv || kind == ir::OpKind::kMaxPool || kind == ir::OpKind::kAveragePool ||
         kind == ir::OpKind::kGlobalAveragePool;
}

}  // namespace

const ir::Op* gatheringConv(const topology::ChipSpec& chip, const ir::Graph& graph, ir::TensorId id) {
  const ir::Tensor& t = graph.tensor(id);
  if (t.role != ir::TensorRole::kInput || t.users.size() != 1) return nullptr;
  const ir::Op& op = graph.op(t.users[0]);
  if (op.kind != ir::OpKind::kConv || op.inputs[0] != id || op.inputs.size() < 2 || op.intAttr("group", 1) != 1)
    return nullptr;
  const auto& w = graph.tensor(op.inputs[1]).shape;
  if (w.size() != 4) return nullptr;
  return w[1] * w[2] * w[3] * ir::dtypeBytes(t.dtype) <= chip.vectorBytes ? &op : nullptr;
}

std::int64_t blockDiagonalGroups(const ir::Graph& graph, const ir::Op& conv) {
  const std::int64_t group = conv.intAttr("group", 1);
  if (group <= 1 || conv.inputs.size() < 2) return 1;
  const auto& x = graph.tensor(conv.inputs[0]).shape;
  const auto& w = graph.tensor(conv.inputs[1]).shape;
  const bool depthwise = x.size() == 4 && group == x[1] && !w.empty() && w[0] == group;
  return depthwise ? 1 : group;
}

bool spatialGraph(const ir::Graph& graph) {
  return std::any_of(graph.ops().begin(), graph.ops().end(), [](const ir::Op& op) { return isSpatialOp(op.kind); });
}

std::vector<bool> channelsLastTensors(const ir::Graph& graph) {
  const size_t n = graph.tensors().size();
  std::vector<bool> out(n, false);
  if (!spatialGraph(graph)) return out;
  // 4-D tensors that must share a layout (an elementwise op's operands and result, a copy's parts
  // and whole) form one group; a group is channels-last when a window op or BatchNormalization
  // reads or writes one of its tensors, row-major when only matmuls and last-axis normalisations do.
  std::vector<size_t> parent(n);
  for (size_t i = 0; i < n; ++i) parent[i] = i;
  const auto find = [&](size_t t) {
    while (parent[t] != t) t = parent[t] = parent[parent[t]];
    return t;
  };
  enum : std::uint8_t { kWindowUse = 1, kRowUse = 2 };
  std::vector<std::uint8_t> uses(n, 0);
  for (const ir::Op& op : graph.ops()) {
    const ir::LoweringFamily family = ir::opDefinition(op.kind).lowering;
    const bool window = family == ir::LoweringFamily::kConv || family == ir::LoweringFamily::kPool ||
                        family == ir::LoweringFamily::kBatchNorm || op.kind == ir::OpKind::kGlobalAveragePool ||
                        op.kind == ir::OpKind::kConvInputGrad || op.kind == ir::OpKind::kConvWeightGrad ||
                        op.kind == ir::OpKind::kMaxPoolGrad || op.kind == ir::OpKind::kAveragePoolGrad;
    const bool row = family == ir::LoweringFamily::kMatMul || family == ir::LoweringFamily::kNormalization;
    const bool shared = family == ir::LoweringFamily::kElementwise || family == ir::LoweringFamily::kCopy;
    std::vector<ir::TensorId> maps;
    for (const auto* list : {&op.inputs, &op.outputs})
      for (ir::TensorId t : *list)
        if (t >= 0 && graph.tensor(t).shape.size() == 4) maps.push_back(t);
    for (ir::TensorId t : maps) {
      uses[static_cast<size_t>(t)] |= window ? kWindowUse : row ? kRowUse : 0;
      if (shared) parent[find(static_cast<size_t>(t))] = find(static_cast<size_t>(maps.front()));
    }
  }
  std::vector<std::uint8_t> groupUses(n, 0);
  for (size_t t = 0; t < n; ++t) groupUses[find(t)] |= uses[t];
  for (size_t t = 0; t < n; ++t)
    out[t] = graph.tensor(static_cast<ir::TensorId>(t)).shape.size() == 4 &&
             ((groupUses[find(t)] & kWindowUse) || !(groupUses[find(t)] & kRowUse));
  return out;
}

std::pair<std::int64_t, int> storageGeometry(const topology::ChipSpec& chip, const ir::Graph& graph, ir::TensorId id,
                                             bool channelsLast) {
  const ir::Tensor& t = graph.tensor(id);
  if (!channelsLast || t.shape.size() != 4) return vectorShape(chip, t);
  const auto& s = t.shape;
  auto tilesOf = [&](std::int64_t elements) {
    return static_cast<int>(ceilDiv(elements * ir::dtypeBytes(t.dtype), chip.vectorBytes));
  };
  for (ir::OpId u : t.users) {
    const ir::Op& op = graph.op(u);
    if (op.kind == ir::OpKind::kConv && op.inputs.size() > 1 && op.inputs[1] == id)
      return {blockDiagonalGroups(graph, op) * s[1] * s[2] * s[3], tilesOf(s[0])};
  }
  if (const ir::Op* conv = gatheringConv(chip, graph, id)) {
    const auto& y = graph.tensor(conv->outputs[0]).shape;
    const auto& w = graph.tensor(conv->inputs[1]).shape;
    return {y[0] * y[2] * y[3], tilesOf(w[1] * w[2] * w[3])};
  }
  return {s[0] * s[2] * s[3], tilesOf(s[1])};
}

std::pair<std::int64_t, int> tensorGeometry(const topology::ChipSpec& chip, const ir::Graph& graph, ir::TensorId id) {
  return storageGeometry(chip, graph, id, channelsLastTensors(graph)[static_cast<size_t>(id)]);
}

namespace detail {

namespace {

Window windowOf(const ir::Graph& graph, const ir::Op& op) {
  const auto& x = graph.tensor(op.inputs[0]).shape;
  const auto& y = graph.tensor(op.outputs[0]).shape;
  Window win;
  win.n = x[0];
  win.h = x[2];
  win.w = x[3];
  win.ho = y[2];
  win.wo = y[3];
  const ir::WindowAttrs attrs =
      ir::windowAttrs(op, 2, op.inputs.size() > 1 ? graph.tensor(op.inputs[1]).shape : std::vector<std::int64_t>{});
  win.kh = attrs.kernel[0];
  win.kw = attrs.kernel[1];
  win.sh = attrs.strides[0];
  win.sw = attrs.strides[1];
  win.dh = attrs.dilations[0];
  win.dw = attrs.dilations[1];
  win.pt = attrs.padBegin(0);
  win.pl = attrs.padBegin(1);
  return win;
}

}  // namespace

std::set<std::int64_t> Lowering::bandCuts(const Window& win, ir::TensorId in) const {
  // Tap (ky, kx) of pixel p reads input pixel p + d, d = dy W + dx: a block that holds no pixel
  // B - d of an input segment end B reads each tap's rows from one segment. Over segments of whole
  // image rows the column offset dx only reaches padding, so the bands are cut at B - dy W; blocks
  // that read the (shorter) last segment are cut to its length.
  std::set<std::int64_t> cuts;
  if (!win.unitStride()) return cuts;
  const TensorState& xs = tensors_.at(in);
  const std::int64_t seg = xs.segmentRows(), inRows = xs.placement.rows, pixels = win.n * win.ho * win.wo;
  const bool wholeRows = seg % win.w == 0;
  const std::int64_t lastStart = (ceilDiv(inRows, seg) - 1) * seg, lastRows = inRows - lastStart;
  for (std::int64_t ky = 0; ky < win.kh; ++ky)
    for (std::int64_t kx = 0; kx < (wholeRows ? 1 : win.kw); ++kx) {
      const std::int64_t d = (ky * win.dh - win.pt) * win.w + (wholeRows ? 0 : kx * win.dw - win.pl);
      for (std::int64_t b = seg; b < inRows; b += seg)
        if (b - d > 0 && b - d < pixels) cuts.insert(b - d);
      if (lastRows < seg)
        for (std::int64_t b = lastStart - d + lastRows; b < pixels; b += lastRows)
          if (b > 0) cuts.insert(b);
    }
  return cuts;
}

std::vector<std::array<std::int64_t, 3>> Lowering::cutBlock(const std::array<std::int64_t, 3>& block,
                                                            const std::set<std::int64_t>& cuts, std::int64_t tm) {
  std::vector<std::array<std::int64_t, 3>> pieces;
  const std::int64_t end = block[1] + block[2];
  for (std::int64_t p0 = block[1]; p0 < end;) {
    const auto cut = cuts.upper_bound(p0);
    const std::int64_t p1 = cut == cuts.end() ? end : std::min(end, *cut);
    for (std::int64_t b0 = p0; b0 < p1; b0 += tm) pieces.push_back({block[0], b0, std::min(tm, p1 - b0)});
    p0 = p1;
  }
  return pieces;
}

std::vector<std::array<std::int64_t, 3>> Lowering::windowBlocks(const Window& win, ir::TensorId in,
                                                                const std::vector<ir::TensorId>& outs, std::int64_t tm,
                                                                bool bands) const {
  // Unit stride: blocks of tm pixels over the whole map, cut at the bands (bandCuts) unless the
  // caller reads each block's taps in bands itself. Otherwise one output row per block (the input
  // address advances by the stride inside a row and jumps between rows).
  std::vector<std::array<std::int64_t, 3>> blocks;
  const std::int64_t pixels = win.n * win.ho * win.wo;
  if (win.unitStride()) {
    const std::set<std::int64_t> cuts = bands ? bandCuts(win, in) : std::set<std::int64_t>{};
    std::vector<ir::TensorId> cutBy = outs;
    cutBy.push_back(in);
    for (const auto& [r0, n] : rowPieces(0, pixels, cutBy))
      for (const auto& b : cutBlock({0, r0, n}, cuts, tm)) blocks.push_back(b);
  } else {
    for (std::int64_t row = 0; row < win.n * win.ho; ++row)
      for (const auto& [r0, n] : rowPieces(row * win.wo, (row + 1) * win.wo, outs)) blocks.push_back({0, r0, n});
  }
  return blocks;
}

std::pair<Step, Lowering::Access> Lowering::windowRead(const Window& win, ir::TensorId in, int tile,
                                                       const std::array<std::int64_t, 3>& block, std::int64_t ky,
                                                       std::int64_t kx, bool* exact, int replica) const {
  // Output pixels [row0, row0 + rows) read input pixels at the tap's offset, from the segment that
  // holds every one of them that is not padding (windowBlocks cut the blocks so that one does). A
  // read that would run past that segment's ends is moved inside it: the rows it then misses or
  // adds are padding taps (which value lands there is the functional mode's part).
  const TensorState& xs = tensors_.at(in);
  const std::int64_t row0 = block[1], rows = block[2];
  const std::int64_t segRows = xs.segmentRows();
  std::int64_t first = 0, stride = 1, anchor = 0;
  if (win.unitStride()) {
    first = row0 + (ky * win.dh - win.pt) * win.w + (kx * win.dw - win.pl);
    anchor = segRows % win.w == 0 ? row0 + (ky * win.dh - win.pt) * win.w : first;
  } else {
    const std::int64_t image = row0 / (win.ho * win.wo), rem = row0 % (win.ho * win.wo);
    const std::int64_t oy = rem / win.wo, ox = rem % win.wo;
    const std::int64_t iy = std::clamp<std::int64_t>(oy * win.sh + ky * win.dh - win.pt, 0, win.h - 1);
    anchor = image * win.h * win.w + iy * win.w;
    first = anchor + ox * win.sw + kx * win.dw - win.pl;
    stride = win.sw;
    if (segRows % win.w != 0) anchor = first + ((rows - 1) * stride) / 2;
  }
  const std::int64_t span = (rows - 1) * stride;
  const std::int64_t segStart = std::clamp<std::int64_t>(anchor, 0, xs.placement.rows - 1) / segRows * segRows;
  const std::int64_t segEnd = std::min(xs.placement.rows, segStart + segRows);
  const std::int64_t wanted = first;
  first = std::clamp<std::int64_t>(first, segStart, std::max(segStart, segEnd - 1 - span));
  // A strided read moved into its segment keeps its stride phase where the segment allows: the
  // pixels it then misses are padding at the row's ends, and its vectors stay the tap's pixels.
  if (stride > 1 && first != wanted) {
    const std::int64_t phase = ((wanted - first) % stride + stride) % stride;
    for (const std::int64_t phased : {first + phase, first + phase - stride})
      if (phase != 0 && phased >= segStart && phased + span < segEnd) {
        first = phased;
        break;
      }
  }
  // The pixels of the tap exactly: no padding (a unit-stride stream over all pixels has none only
  // for a 1 x 1 window) and no clamping into the segment.
  if (exact) *exact = win.inside() && first == wanted;
  assert(first + span < segEnd && "a window read longer than its input segment");
  const int copy = replica % xs.placement.replicas;
  const int piece = xs.pieceOf(tile, first, copy);
  Step s;
  s.inst = makeInst(xs.placement.memUnit[piece], Opcode::kMemRead, rows);
  s.inst.address = xs.placement.address[piece] + static_cast<int>(first - segStart);
  s.inst.stride = static_cast<std::int32_t>(stride);
  s.reads = in;
  return {s, Access{in, tile, first, span + 1, 0, copy}};
}

int Lowering::addWindow(const Window& win, const std::array<std::int64_t, 3>& block, std::int64_t ky,
                        std::int64_t kx, const std::pair<Step, Access>& read, std::int64_t lanes, float fill,
                        std::int64_t laneShift) {
  isa::WindowRead w;
  w.h = win.h, w.w = win.w, w.ho = win.ho, w.wo = win.wo;
  w.sh = win.sh, w.sw = win.sw, w.dh = win.dh, w.dw = win.dw, w.pt = win.pt, w.pl = win.pl;
  w.ky = ky, w.kx = kx;
  w.pixel0 = block[1];
  w.first = read.second.row0;
  w.stride = read.first.inst.stride;
  w.laneShift = static_cast<std::int32_t>(laneShift);
  w.lanes = static_cast<std::int32_t>(lanes);
  w.fill = fill;
  out_.windows.push_back(w);
  return static_cast<int>(out_.windows.size()) - 1;
}

int Lowering::windowOperand(const Window& win, const std::array<std::int64_t, 3>& block, std::int64_t ky,
                            std::int64_t kx, const std::pair<Step, Access>& read, std::int64_t lanes, float fill,
                            std::int64_t laneShift) {
  isa::FunctionalOperand operand;
  operand.window = addWindow(win, block, ky, kx, read, lanes, fill, laneShift);
  return addOperand(operand);
}

Status Lowering::lowerConv(const ir::Op& op, const std::vector<ir::OpId>& ops, size_t position, int& consumed) {
  const ir::TensorId in = op.inputs[0];
  const ir::Tensor& x = graph_.tensor(in);
  const ir::Tensor& w = graph_.tensor(op.inputs[1]);
  const std::int64_t group = op.intAttr("group", 1);
  if (x.shape.size() != 4)
    return modelError(op.name, fmt::format("Conv over {} spatial dimensions cannot be lowered (2-D only)",
                                           x.shape.size() - 2));
  if (group > 1 && group == x.shape[1] && w.shape[0] == group) return lowerDepthwiseConv(op);
  // A grouped Conv (ResNeXt, RegNet) is a dense one over its block-diagonal weights (blockDiagonalGroups):
  // a plane holds a whole tile of input x output channels whatever the groups, and the K tiles
  // whose rows hold no weight of an output tile's groups are skipped (job.kUsed).
  if (ir::dtypeBytes(x.dtype) != ir::dtypeBytes(w.dtype))
    return modelError(op.name, "activations and weights must have the same storage width");
  MxmJob job;
  job.op = &op;
  job.weights = op.inputs[1];
  job.out = op.outputs[0];
  if (op.inputs.size() >= 3) job.bias = op.inputs[2];
  job.timingOnly = op.hasAttr("auto_pad") && op.stringAttr("auto_pad", "NOTSET") != "NOTSET" &&
                   op.stringAttr("auto_pad", "NOTSET") != "VALID";
  // Inference batch normalisation folds into the Conv: its scale into the weights (at compile
  // time), its shift into the epilogue's bias add; a ReLU after it is the epilogue's activation.
  if (const ir::Op* bn = soleUser(job.out, ops, position + 1, {ir::OpKind::kBatchNormalization})) {
    job.bias = bn->inputs[2];
    job.out = bn->outputs[0];
    // The program's SRAM image holds the folded weights and shift (Program::folds) when the weights
    // and beta serve this pair alone and the Conv has no bias of its own; else timed, not computed.
    if (op.inputs.size() < 3 && foldsAlone(op.inputs[1], op) && foldsAlone(bn->inputs[2], *bn))
      for (const auto kind : {isa::WeightFold::Kind::kWeights, isa::WeightFold::Kind::kShift})
        recordFold(*bn, kind == isa::WeightFold::Kind::kWeights ? op.inputs[1] : bn->inputs[2], kind, op.inputs[1]);
    else
      job.timingOnly = true;
    ++consumed;
  }
  // A residual Add of an earlier feature map of the output's shape joins the epilogue too.
  if (const ir::Op* add = soleUser(job.out, ops, position + consumed, {ir::OpKind::kAdd})) {
    const ir::TensorId other = add->inputs[0] == job.out ? add->inputs[1] : add->inputs[0];
    if (other != job.out && placed(other) && graph_.tensor(other).shape == graph_.tensor(job.out).shape) {
      job.residual = other;
      job.out = add->outputs[0];
      ++consumed;
    }
  }
  if (const ir::Op* act = soleUser(job.out, ops, position + consumed, {ir::OpKind::kRelu})) {
    job.out = act->outputs[0];
    if (reluAfterPool(job.out))
      poolRelu_.insert(job.out);  // stored before the ReLU: the max-pool applies it (reluAfterPool)
    else
      job.activation = act->kind;
    ++consumed;
  }
  if (job.bias >= 0)
    if (auto s = place(job.bias, graph_.tensor(job.bias).producer < 0, slicesOf(in)); !s) return s;
  alloc::SliceSet avoid = slicesOf(in);
  for (ir::TensorId side : {job.bias, job.residual})
    avoid.insert(slicesOf(side));
  if (auto s = place(job.out, false, avoid, readCopies(job.out)); !s) return s;
  const std::vector<ir::TensorId> rowMaps = job.rowMaps();

  const Window win = windowOf(graph_, op);
  const int eb = ir::dtypeBytes(x.dtype);
  const std::int64_t cin = x.shape[1], cout = w.shape[0];
  const std::int64_t pixels = win.n * win.ho * win.wo;
  const int planeElems = chip_.vectorBytes / std::max(1, eb);
  job.macs = pixels * cout * w.shape[1] * win.taps() * (eb == 1 ? 1 : chip_.mxmFp16RateDivisor);
  const TensorState& xs = tensors_.at(in);
  const MatMulTiling tiling = chooseMatMulTiling(chip_, pixels, cin * win.taps(), cout, eb,
                                                 chip_.sramBytes() / (3 * std::max(1, eb)));
  std::int64_t tm = tiling.tm;
  const int nTiles = tensors_.at(job.out).placement.tiles;
  if (nTiles % chip_.mxmPlanes != 0 && pixels >= std::int64_t{chip_.mxmPlanes} * 2 * chip_.mxmWeightInstallCycles)
    tm = std::min<std::int64_t>(tm, ceilDiv(pixels, chip_.mxmPlanes));
  if (gatheringConv(chip_, graph_, in) == &op) {
    // Window-gathered input: a plain matmul over packed (kh*kw*Cin)-element vectors.
    job.kTiles = xs.placement.tiles;
    // A map a window op reads next (the stem's max-pool) comes in blocks of two image rows: its
    // reader's passes over the first rows of a segment run while the planes compute the others.
    if (windowRowLength(job.out) > 1) tm = std::min<std::int64_t>(tm, 2 * win.wo);
    // Blocks taken in turn from every segment: the planes, which start one block each at once, then
    // write (and read) different MEM slices, and each segment is written a block at a time over the
    // whole conv, so that its reader's passes over the rows done fit between its writes.
    std::vector<std::vector<std::array<std::int64_t, 3>>> bySegment;
    std::vector<ir::TensorId> cutBy = rowMaps;
    cutBy.push_back(in);
    for (const auto& [r0, n] : rowPieces(0, pixels, cutBy)) {
      bySegment.emplace_back();
      for (std::int64_t b0 = r0; b0 < r0 + n; b0 += tm) bySegment.back().push_back({0, b0, std::min(tm, r0 + n - b0)});
    }
    for (size_t j = 0, more = 1; more; ++j) {
      more = 0;
      for (const auto& segment : bySegment)
        if (j < segment.size()) job.blocks.push_back(segment[j]), more = 1;
    }
    job.source = [this, in](int k, const std::array<std::int64_t, 3>& block) {
      return std::make_pair(readStep(in, k, block[1], block[2], false), Access{in, k, block[1], block[2], 0});
    };
    job.weightRow = [planeElems](std::int64_t, int k) { return std::int64_t{k} * planeElems; };
    const std::int64_t window = cin * win.taps();
    job.weightRows = [planeElems, window](int k) {
      return std::min<std::int64_t>(planeElems, window - std::int64_t{k} * planeElems);
    };
    return lowerMxm(job);
  }
  // Few input channels: the taps are packed, g per vector, by gather passes (tapPasses: each tap's
  // rows shifted to its lanes on the SXM and merged on the VXM into a scratch buffer per packed
  // tile and block), and the MXM streams ceil(taps / g) vectors per pixel instead of one per tap.
  const int cinTiles = xs.placement.tiles;
  const std::int64_t g = cinTiles == 1 ? chip_.vectorBytes / std::max<std::int64_t>(1, cin * eb) : 1;
  if (g >= 2 && win.taps() > 1) {
    // Worth it when the MXM cycles saved per plane exceed the latency of one gather chain (g passes,
    // each a block's rows plus the widest time of flight) that the planes first wait for.
    const auto blocks = windowBlocks(win, in, rowMaps, tm, false);
    const std::int64_t saved = (win.taps() - ceilDiv(win.taps(), g)) * pixels * nTiles / chip_.mxmPlanes;
    const std::int64_t chain = g * (ceilDiv(pixels, static_cast<std::int64_t>(blocks.size())) + chip_.sliceCount());
    if (saved > chain) {
      // Over segments of three or more image rows, blocks of half a segment (one and a half rows):
      // a block's gathers then finish sooner, so the planes start this Conv sooner behind the
      // producer's rows and its computes interleave with the gathers in finer steps (ResNet-50
      // stage 1, 168-row segments: layer1.1 4,186 -> 4,048 cycles, layer1.0 5,023 -> 4,733).
      const std::int64_t segRows = xs.segmentRows();
      if (segRows % win.w == 0 && segRows >= 3 * win.w) tm = std::min(tm, segRows / 2);
      return lowerPackedConv(job, win, in, g, tm);
    }
  }
  // Implicit GEMM: K tile (tap, input-channel tile) streams the input rows under that tap.
  job.kTiles = static_cast<int>(win.taps()) * cinTiles;
  job.blocks = windowBlocks(win, in, rowMaps, tm);
  job.source = [this, in, win, cinTiles](int k, const std::array<std::int64_t, 3>& block) {
    const std::int64_t tap = k / cinTiles;
    return windowRead(win, in, k % cinTiles, block, tap / win.kw, tap % win.kw, nullptr, static_cast<int>(tap));
  };
  job.weightRow = [cin, cinTiles, planeElems](std::int64_t, int k) {
    return (k / cinTiles) * cin + std::int64_t{k % cinTiles} * planeElems;
  };
  job.weightRows = [cin, cinTiles, planeElems](int k) {
    return std::min<std::int64_t>(planeElems, cin - std::int64_t{k % cinTiles} * planeElems);
  };
  if (const std::int64_t groups = blockDiagonalGroups(graph_, op); groups > 1) {
    // K tile k holds input channels [c0, c1) of its tap; output tile n needs it when their groups meet.
    const std::int64_t cinPerGroup = cin / groups, coutPerGroup = cout / groups;
    job.kUsed = [=](int k, int n) {
      const std::int64_t c0 = std::int64_t{k % cinTiles} * planeElems, c1 = std::min(cin, c0 + planeElems);
      const std::int64_t o0 = std::int64_t{n} * planeElems, o1 = std::min(cout, o0 + planeElems);
      return c0 / cinPerGroup <= (o1 - 1) / coutPerGroup && o0 / coutPerGroup <= (c1 - 1) / cinPerGroup;
    };
  }
  // Padding taps and rows read off the tap's pixels (the read moved into its segment) are the
  // compute's window operand: functional mode realigns the stream to the output pixels.
  const int planeLanes = planeElems;
  job.window = [this, in, win, cinTiles, cin, planeLanes](int k, const std::array<std::int64_t, 3>& block) {
    const std::int64_t tap = k / cinTiles;
    bool exact = false;
    const auto read = windowRead(win, in, k % cinTiles, block, tap / win.kw, tap % win.kw, &exact);
    if (exact) return -1;
    const std::int64_t lanes = std::min<std::int64_t>(planeLanes, cin - std::int64_t{k % cinTiles} * planeLanes);
    return windowOperand(win, block, tap / win.kw, tap % win.kw, read, lanes, 0.0f, 0);
  };
  return lowerMxm(job);
}

Status Lowering::lowerPackedConv(MxmJob& job, const Window& win, ir::TensorId in, std::int64_t g, std::int64_t tm) {
  const std::int64_t cin = graph_.tensor(in).shape[1];
  const std::int64_t packedTiles = ceilDiv(win.taps(), g);
  job.kTiles = static_cast<int>(packedTiles);
  // Blocks as the MXM streams them; their gathers go band by band.
  job.blocks = windowBlocks(win, in, job.rowMaps(), tm, false);
  alloc::SliceSet avoid = slicesOf(in);
  for (ir::TensorId t : {job.out, job.bias, job.residual})
    avoid.insert(slicesOf(t));
  // packed[k][b]: the scratch block of packed tile k for row block b, and the last pass of each of
  // its gather chains: one chain per band of the block (bandCuts), each tap of a band reading the
  // rows it needs from one input segment, written to the band's rows of the scratch block.
  const std::set<std::int64_t> cuts = bandCuts(win, in);
  // Row triplets, for a 3 x 3 Conv (unit stride, padding 1) whose vector holds five taps: every
  // pixel's row of three taps, T(p) = [x(p-1), x(p), x(p+1)], is gathered once (two passes over x,
  // stored twice as x is), and the packed tiles are one pass each: tile 0 = T(p-W) + T(p) moved up
  // three taps (taps (-1,-1) to (0,0); T(p)'s third tap falls off the vector's end), tile 1 =
  // x(p+1) + T(p+W) moved up one tap (taps (0,1) to (1,1)). 4 ALU steps, 4 SXM shifts and 8 MEM
  // reads a pixel instead of 7, 7 and 12 with a chain of passes over each tile's taps.
  const TensorState& xs = tensors_.at(in);
  const auto tripletsId = static_cast<ir::TensorId>(graph_.tensors().size());  // this op's own, dropped below
  bool triplets = g == 5 && packedTiles == 2 && win.kh == 3 && win.kw == 3 && win.unitStride() && win.dh == 1 &&
                  win.dw == 1 && win.pt == 1 && win.pl == 1 && xs.placement.tiles == 1 &&
                  xs.placement.replicas >= 2 && xs.segments() > 1 && xs.segmentRows() % win.w == 0 &&
                  out_.sram.inUse() + Bytes{2} * xs.placement.rows * chip_.vectorBytes <= out_.sram.capacity() / 2;
  if (triplets) {
    TensorState st;
    st.placement.name = job.op->name + " row triplets";
    st.placement.dtype = xs.placement.dtype;
    st.placement.rows = xs.placement.rows;
    st.placement.tiles = 1;
    st.placement.segmentRows = xs.placement.segmentRows;
    st.placement.replicas = 2;
    // Segment s of T's copy c on the slice of x's segment s + 1 (copy c): no pass then reads and
    // writes one slice, and T takes no slices of its own (x's copies already take 2 per segment;
    // T on slices of its own, in segments of three of x's, left the op's scratch few slices:
    // layer1.1 4,236 cycles).
    const int segments = st.segments();
    st.writers.resize(static_cast<size_t>(2 * segments));
    st.writerRows.resize(st.writers.size());
    st.readers.resize(st.writers.size());
    const int memFirst = chip_.firstUnit(UnitKind::kMem);
    for (int c = 0; c < 2 && triplets; ++c)
      for (int seg = 0; seg < segments && triplets; ++seg) {
        const int target =
            xs.blocks[static_cast<size_t>(xs.pieceOf(0, ((seg + 1) % segments) * st.segmentRows(), c))].slice;
        alloc::SliceSet others;
        for (int sl = 0; sl < chip_.memSlices; ++sl)
          if (sl != target) others.insert(sl);
        const std::int64_t rows = std::min(st.segmentRows(), st.placement.rows - seg * st.segmentRows());
        auto block = out_.sram.allocate(static_cast<int>(rows), others);
        if (block && block->slice != target) out_.sram.release(*block), block.reset();
        triplets = block.has_value();
        if (!triplets) break;
        st.blocks.push_back(*block);
        st.placement.memUnit.push_back(memFirst + block->slice);
        st.placement.address.push_back(block->address);
      }
    if (triplets)
      tensors_.emplace(tripletsId, std::move(st));
    else
      for (const auto& b : st.blocks) out_.sram.release(b);
  }
  // The pieces of T, freed with the op's scratch once its readers are known, and T's state dropped.
  auto dropTriplets = [&] {
    if (!triplets) return;
    const TensorState& st = tensors_.at(tripletsId);
    for (size_t p = 0; p < st.blocks.size(); ++p) opScratch_.push_back({st.blocks[p], st.readers[p]});
    tensors_.erase(tripletsId);
  };
  // Every block a run of its own on its plane (no regrouping into one run per plane): the planes
  // then take the blocks in turn down the image, and the plane-order search moves each block's
  // run alone (layer1.0 / 1.1 / 1.2 in runs of a quarter of the blocks: 4,742 / 4,038 / 4,144
  // cycles, mean of five seeds; in runs of one block 4,627 / 3,917 / 4,167).
  job.blockRuns = triplets;
  if (triplets) {
    // T in passes of half an image row: short chains fit between the runs that hold the MEM ports
    // (layer1.0 / 1.1 / 1.2 in passes of the Conv's blocks, 84 rows: 4,752 / 4,095 / 4,298 cycles; of 28:
    // 4,626 / 3,920 / 4,133).
    const std::int64_t passRows = std::max<std::int64_t>(1, win.w / 2);
    Window row = win;  // the row's three taps: 1 x 3, no padding above
    row.kh = 1;
    row.pt = 0;
    for (const auto& [r0, n] : rowPieces(0, win.n * win.ho * win.wo, {in}))
      for (std::int64_t b0 = r0; b0 < r0 + n; b0 += passRows) {
        const std::array<std::int64_t, 3> block{0, b0, std::min(passRows, r0 + n - b0)};
        std::vector<Access> writes;
        for (int c = 0; c < 2; ++c) writes.push_back({tripletsId, 0, block[1], block[2], 0, c});
        auto chain = tapPasses(job.op->name + " row triplets", row, in, 0, block, 0, 3, true, isa::VxmFunc::kConvert,
                               isa::VxmFunc::kAdd, true, 0.0f,
                               [&](int producer, int c) {
                                 return writeStep(tripletsId, 0, block[1], block[2], producer, c);
                               },
                               writes, avoid);
        if (!chain) {
          dropTriplets();
          return chain.error();
        }
      }
  }
  // One pass of a packed tile over T (tile 0: T(p-W) + T(p) up three taps; tile 1: x(p+1) + T(p+W)
  // up one tap), written to `rows`.
  const int vxm = chip_.firstUnit(UnitKind::kVxm);
  int shifts = 0;
  auto tripletPass = [&](std::int64_t k, const std::array<std::int64_t, 3>& band, const alloc::Block& rows) {
    const ir::TensorId source = k == 0 ? tripletsId : in;
    const std::int64_t kyA = k == 0 ? 0 : 1, kxA = k == 0 ? 1 : 2, lanesA = (k == 0 ? 3 : 1) * cin;
    const std::int64_t kyB = k == 0 ? 1 : 2, shift = (k == 0 ? 3 : 1) * cin;
    Task task;
    task.name = fmt::format("{} gather tile {} rows {}", job.op->name, k, band[1]);
    auto a = windowRead(win, source, 0, band, kyA, kxA, nullptr, k == 0 ? 0 : 1);
    auto b = windowRead(win, tripletsId, 0, band, kyB, 1, nullptr, k == 0 ? 1 : 0);
    a.second.step = 0;
    b.second.step = 1;
    task.steps.push_back(a.first);
    task.steps.push_back(b.first);
    Step moved;
    moved.inst = makeInst(gatherShiftUnit(b.first.inst.unit, band[2], shifts++), Opcode::kSxmShift, band[2]);
    moved.inst.sxm = isa::SxmFunc::kWindow;
    isa::FunctionalOperand realigned;
    realigned.window = addWindow(win, band, kyB, 1, b, 3 * cin, 0.0f, shift);
    moved.inst.operand = addOperand(realigned);
    moved.producer = 1;
    task.steps.push_back(moved);
    Step alu;
    alu.inst = makeInst(vxm, Opcode::kVxmBinary, band[2]);
    alu.inst.func = isa::VxmFunc::kAdd;
    isa::FunctionalOperand both;
    both.window = addWindow(win, band, kyA, kxA, a, lanesA, 0.0f, 0);
    alu.inst.operand = addOperand(both);
    alu.producer = 0;
    alu.producer2 = 2;
    task.steps.push_back(alu);
    task.steps.push_back(makeWriteOf(rows, band[2], 3));
    const int id = addTask(std::move(task), {a.second, b.second}, {});
    return TapChain{id, 4};
  };
  std::vector<std::vector<std::pair<alloc::Block, std::vector<TapChain>>>> packed(static_cast<size_t>(packedTiles));
  std::map<std::int64_t, size_t> blockIndex;
  for (size_t b = 0; b < job.blocks.size(); ++b) {
    blockIndex[job.blocks[b][1]] = b;
    for (std::int64_t k = 0; k < packedTiles; ++k) {
      auto buffer = scratch(job.blocks[b][2], avoid);
      if (!buffer) {
        dropTriplets();
        return buffer.error();
      }
      const alloc::Block pb = *buffer;
      std::vector<TapChain> chains;
      for (const auto& band : cutBlock(job.blocks[b], cuts, job.blocks[b][2])) {
        const alloc::Block rows{pb.slice, pb.address + static_cast<int>(band[1] - job.blocks[b][1]),
                                static_cast<int>(band[2])};
        Expected<TapChain> chain = triplets ? Expected<TapChain>(tripletPass(k, band, rows))
                                            : tapPasses(job.op->name + " gather", win, in, 0, band, k * g,
                                                        std::min(win.taps(), (k + 1) * g), true, isa::VxmFunc::kConvert,
                                                        isa::VxmFunc::kAdd, true, 0.0f,
                                                        [&](int producer, int) { return makeWriteOf(rows, band[2], producer); },
                                                        {{-1, 0, 0, band[2], 0}}, avoid);
        if (!chain) {
          dropTriplets();
          return chain.error();
        }
        waitForFreedReaders(rows, chain->task, chain->writeStep);
        chains.push_back(*chain);
      }
      packed[k].push_back({pb, std::move(chains)});
    }
  }
  std::vector<std::vector<std::pair<int, int>>> readers(packed.size() * job.blocks.size());
  job.source = [this, &packed, &blockIndex](int k, const std::array<std::int64_t, 3>& block) {
    const size_t b = blockIndex.at(block[1]);
    return std::make_pair(makeReadOf(packed[k][b].first, block[2]),
                          Access{-1, static_cast<int>(k * blockIndex.size() + b), 0, block[2], 0});
  };
  job.scratchSource = [&packed, &blockIndex, &readers](const Access& a, int task) {
    const size_t k = static_cast<size_t>(a.tile) / blockIndex.size(), b = static_cast<size_t>(a.tile) % blockIndex.size();
    readers[a.tile].push_back({task, 0});
    std::vector<std::pair<int, int>> writers;
    for (const TapChain& c : packed[k][b].second) writers.push_back({c.task, c.writeStep});
    return writers;
  };
  job.weightRow = [g, cin](std::int64_t, int k) { return std::int64_t{k} * g * cin; };
  const std::int64_t taps = win.taps();
  job.weightRows = [g, cin, taps](int k) { return (std::min(taps, (std::int64_t{k} + 1) * g) - std::int64_t{k} * g) * cin; };
  const Status lowered = lowerMxm(job);
  for (size_t k = 0; k < packed.size(); ++k)
    for (size_t b = 0; b < packed[k].size(); ++b)
      opScratch_.push_back({packed[k][b].first, readers[k * blockIndex.size() + b]});
  dropTriplets();
  return lowered;
}

bool Lowering::foldsAlone(ir::TensorId tensor, const ir::Op& user) const {
  const ir::Tensor& t = graph_.tensor(tensor);
  return t.producer < 0 && t.users.size() == 1 && &graph_.op(t.users[0]) == &user;
}

void Lowering::recordFold(const ir::Op& bn, ir::TensorId tensor, isa::WeightFold::Kind kind, ir::TensorId weights) {
  isa::WeightFold fold;
  fold.tensor = graph_.tensor(tensor).name;
  fold.kind = kind;
  if (kind == isa::WeightFold::Kind::kWeights) fold.source = graph_.tensor(weights).name;
  fold.gamma = graph_.tensor(bn.inputs[1]).name;
  fold.beta = graph_.tensor(bn.inputs[2]).name;
  fold.mean = graph_.tensor(bn.inputs[3]).name;
  fold.var = graph_.tensor(bn.inputs[4]).name;
  fold.epsilon = bn.floatAttr("epsilon", 1e-5);
  out_.folds.push_back(fold);
}

Status Lowering::lowerBatchNorm(const ir::Op& op) {
  // Inference form on the VXM: y = x * scale + shift per channel (mean and variance folded into
  // scale and shift at compile time: the program's image holds them in gamma's and beta's places,
  // Program::folds), the channel vectors read as broadcast rows.
  const bool folds = foldsAlone(op.inputs[1], op) && foldsAlone(op.inputs[2], op);
  if (folds) {
    recordFold(op, op.inputs[1], isa::WeightFold::Kind::kScale, -1);
    recordFold(op, op.inputs[2], isa::WeightFold::Kind::kShift, -1);
  }
  return lowerVxmChain(op, {op.inputs[0], op.inputs[1], op.inputs[2]}, {isa::VxmFunc::kMul, isa::VxmFunc::kAdd},
                       folds);
}

int Lowering::readCopies(ir::TensorId tensor) const {
  const ir::Tensor& t = graph_.tensor(tensor);
  if (!spatial_ || t.role != ir::TensorRole::kActivation || c2cTensors_.count(tensor) || t.users.empty()) return 1;
  for (ir::OpId u : t.users) {
    const ir::Op& user = graph_.op(u);
    const bool window = user.kind == ir::OpKind::kConv || user.kind == ir::OpKind::kMaxPool ||
                        user.kind == ir::OpKind::kAveragePool;
    if (!window || user.inputs[0] != tensor || graph_.tensor(tensor).shape.size() != 4 ||
        windowOf(graph_, user).taps() < 4)
      return 1;
    // A Conv only when its gather passes pack several taps per vector (few input channels): then
    // every tap is a pass of its own over the input (tapPasses); an implicit GEMM's taps are K tiles
    // the planes stream one after another anyway.
    if (user.kind == ir::OpKind::kConv &&
        graph_.tensor(user.inputs[1]).shape[1] * ir::dtypeBytes(t.dtype) * 3 > chip_.vectorBytes)
      return 1;
  }
  const int copies = 2;
  const auto [rows, tiles] = geometry(tensor);
  // Only while SRAM stays at most half full: the copies are a speed-up, never a reason not to fit.
  if (out_.sram.inUse() + Bytes{copies} * rows * tiles * chip_.vectorBytes > out_.sram.capacity() / 2) return 1;
  return copies;
}

std::int64_t Lowering::windowRowLength(ir::TensorId tensor, int depth) const {
  const ir::Tensor& t = graph_.tensor(tensor);
  if (!channelsLast(tensor)) return 1;
  // A map of the same image rows further on: one a 1 x 1 unit-stride Conv writes through its
  // epilogue (BatchNorm, a residual Add, ReLU), or such an epilogue op's output.
  auto behind = [&](ir::TensorId out) -> std::int64_t {
    const auto& shape = graph_.tensor(out).shape;
    if (depth >= kRowFollowDepth || shape.size() != 4 || shape[2] != t.shape[2] || shape[3] != t.shape[3]) return 1;
    return windowRowLength(out, depth + 1);
  };
  for (ir::OpId u : t.users) {
    const ir::Op& user = graph_.op(u);
    if (user.outputs.empty()) continue;
    if (user.kind == ir::OpKind::kBatchNormalization || user.kind == ir::OpKind::kRelu ||
        user.kind == ir::OpKind::kAdd) {
      if (const std::int64_t w = behind(user.outputs[0]); w > 1) return w;
      continue;
    }
    const bool window = user.kind == ir::OpKind::kConv || user.kind == ir::OpKind::kMaxPool ||
                        user.kind == ir::OpKind::kAveragePool;
    if (!window || user.inputs[0] != tensor || gatheringConv(chip_, graph_, tensor) == &user) continue;
    const Window win = windowOf(graph_, user);
    if (win.taps() > 1 || !win.unitStride()) return win.w;
    // A 1 x 1 unit-stride Conv keeps the rows: its blocks stay inside its output's segments.
    if (user.kind == ir::OpKind::kConv)
      if (const std::int64_t w = behind(user.outputs[0]); w > 1) return w;
  }
  return 1;
}

bool Lowering::reluAfterPool(ir::TensorId relu) const {
  const ir::Tensor& t = graph_.tensor(relu);
  if (t.users.size() != 1 || graph_.op(t.users[0]).kind != ir::OpKind::kMaxPool) return false;
  return std::find(graph_.outputs().begin(), graph_.outputs().end(), relu) == graph_.outputs().end();
}

int Lowering::gatherShiftUnit(int readUnit, std::int64_t rows, int index) {
  // The SXM of the read's hemisphere, unless the other one has taken fewer shifted rows so far: a
  // block's taps all read one hemisphere, whose SXM units alone would serialise the passes.
  const int vxmSlice = chip_.units()[chip_.firstUnit(UnitKind::kVxm)].slice;
  bool west = chip_.units()[readUnit].slice < vxmSlice;
  if (sxmRows_[west ? 1 : 0] < sxmRows_[west ? 0 : 1]) west = !west;
  sxmRows_[west ? 0 : 1] += rows;
  return chip_.firstUnit(UnitKind::kSxm) + (west ? 0 : chip_.sxmUnits / 2) + index % std::max(1, chip_.sxmUnits / 2);
}

Expected<Lowering::TapChain> Lowering::tapPasses(const std::string& name, const Window& win, ir::TensorId in, int tile,
                                                 const std::array<std::int64_t, 3>& block, std::int64_t tap0,
                                                 std::int64_t tap1, bool shiftLanes, isa::VxmFunc first,
                                                 isa::VxmFunc combine, bool computes, float fill,
                                                 const std::function<Step(int, int)>& finalWrite,
                                                 const std::vector<Access>& finalWrites, const alloc::SliceSet& avoid,
                                                 float tapScale, isa::VxmFunc finish, ir::TensorId tapWeights,
                                                 ir::TensorId bias) {
  // One pass per tap: read the tap's input rows, [shift them to the tap's lanes on the SXM,] combine
  // with the partial of the previous pass, write the new partial. Partials alternate between two
  // scratch blocks, so that no task reads and writes one slice; the last pass writes finalWrite.
  const std::int64_t rows = block[2];
  const int vxm = chip_.firstUnit(UnitKind::kVxm);
  alloc::SliceSet away = avoid;
  alloc::Block partial[2];
  for (auto& p : partial) {
    auto b = scratch(rows, away);
    if (!b) return b.error();
    p = *b;
    away.insert(p.slice);
  }
  std::vector<std::pair<int, int>> readers[2];
  TapChain chain;
  // An input stored in several copies lets a pass read as many taps at once (one from each copy)
  // and combine them before the partial: fewer passes, one ALU step fewer per chain. Only where the
  // first tap is a plain copy (max-pool, a gather), since a group starts with `combine`.
  const std::int64_t copies = first == isa::VxmFunc::kConvert ? tensors_.at(in).placement.replicas : 1;
  // The lanes of the input tile that hold values (a shifted tap moves up by cin per tap).
  const std::int64_t cin = storageCols(in);
  const std::int64_t laneWidth = chip_.vectorBytes / std::max(1, ir::dtypeBytes(graph_.tensor(in).dtype));
  const std::int64_t lanes = std::min(laneWidth, cin - std::int64_t{tile} * laneWidth);
  std::int64_t pass = 0;
  for (std::int64_t tap = tap0; tap < tap1; ++pass) {
    const std::int64_t width = std::min(copies, tap1 - tap);
    Task task;
    task.name = fmt::format("{} tile {} rows {} tap {}", name, tile, block[1], tap);
    std::vector<Access> reads;
    // Per tap: the step carrying its rows to the ALU, and the window the ALU instruction taking it
    // applies (an unshifted tap's; a shifted tap is realigned on its SXM shift).
    std::vector<int> operand, operandWindow;
    for (std::int64_t i = 0; i < width; ++i) {
      const std::int64_t t = tap + i;
      const auto windowed = windowRead(win, in, tile, block, t / win.kw, t % win.kw, nullptr, static_cast<int>(i));
      auto [read, access] = windowed;
      access.step = static_cast<int>(task.steps.size());
      reads.push_back(access);
      task.steps.push_back(read);
      operand.push_back(access.step);
      // The tap realigned to the output pixels: on the SXM with its lane shift, else on the ALU.
      const bool shifted = shiftLanes && t > tap0;
      const int window = computes ? addWindow(win, block, t / win.kw, t % win.kw, windowed, lanes, fill,
                                              shifted ? (t - tap0) * cin : 0)
                                  : -1;
      operandWindow.push_back(shifted ? -1 : window);
      if (shifted) {
        Step shift;  // to the tap's lanes of the packed vector
        shift.inst = makeInst(gatherShiftUnit(read.inst.unit, rows, static_cast<int>(t)), Opcode::kSxmShift, rows);
        shift.inst.sxm = computes ? isa::SxmFunc::kWindow : isa::SxmFunc::kUnspecified;
        if (computes) {
          isa::FunctionalOperand realigned;
          realigned.window = window;
          shift.inst.operand = addOperand(realigned);
        }
        shift.producer = operand.back();
        task.steps.push_back(shift);
        operand.back() = static_cast<int>(task.steps.size()) - 1;
      }
    }
    // ALU steps: `first` on a lone first tap; else `combine` folds the taps, then the partial.
    // An operand that is an unshifted tap is realigned by the instruction (window, window2).
    auto addAlu = [&](int a, int aWindow, int b, int bWindow) {
      Step alu;
      alu.inst = makeInst(vxm, b < 0 && pass == 0 ? Opcode::kVxmUnary : Opcode::kVxmBinary, rows);
      alu.inst.func = b < 0 && pass == 0 ? first : combine;
      alu.inst.timingOnly = !computes;
      if (aWindow >= 0 || bWindow >= 0 || (computes && tapScale != 0.0f)) {
        isa::FunctionalOperand realigned;
        realigned.window = aWindow;
        realigned.window2 = bWindow;
        realigned.immediate = tapScale;  // kScaleAdd: the tap times tapScale, plus the partial (none on the first)
        realigned.immediate2 = pass == 0 ? 0.0f : 1.0f;
        alu.inst.operand = addOperand(realigned);
      }
      alu.producer = a;
      alu.producer2 = b;
      task.steps.push_back(alu);
      return static_cast<int>(task.steps.size()) - 1;
    };
    int aluAt = operand[0];
    int aluWindow = operandWindow[0];
    // A row of one value per lane (channel) read once for every output row (stride 0): tap t's
    // weights of a depthwise convolution, or its bias.
    auto rowOperand = [&](ir::TensorId tensor, std::int64_t row) {
      Step r = readStep(tensor, tile, row, 1, false);
      r.inst.repeat = static_cast<std::int32_t>(rows);
      r.inst.stride = 0;
      reads.push_back({tensor, tile, row, 1, static_cast<int>(task.steps.size())});
      task.steps.push_back(r);
      return static_cast<int>(task.steps.size()) - 1;
    };
    if (tapWeights >= 0) {  // the tap times its weights, then (after the first tap) plus the partial
      const int weightAt = rowOperand(tapWeights, tap);
      Step product;
      product.inst = makeInst(vxm, Opcode::kVxmBinary, rows);
      product.inst.func = isa::VxmFunc::kMul;
      product.inst.timingOnly = !computes;
      if (aluWindow >= 0) {
        isa::FunctionalOperand realigned;
        realigned.window = aluWindow;
        product.inst.operand = addOperand(realigned);
      }
      product.producer = aluAt;
      product.producer2 = weightAt;
      task.steps.push_back(product);
      aluAt = static_cast<int>(task.steps.size()) - 1;
      if (pass > 0) aluAt = addAlu(aluAt, -1, -1, -1);
    } else if (width == 1) {
      aluAt = addAlu(aluAt, aluWindow, -1, -1);
    }
    for (std::int64_t i = 1; i < width; ++i) {
      aluAt = addAlu(aluAt, aluWindow, operand[i], operandWindow[i]);
      aluWindow = -1;  // the folded taps are realigned already
    }
    const alloc::Block& from = partial[(pass + 1) % 2];
    const alloc::Block& to = partial[pass % 2];
    int sideAt = -1;
    if (pass > 0) {
      if (width > 1) aluAt = addAlu(aluAt, -1, -1, -1);  // the group's result, combined with the partial
      task.steps[aluAt].producer2 = static_cast<int>(task.steps.size());
      task.steps.push_back(makeReadOf(from, rows));
      sideAt = static_cast<int>(task.steps.size()) - 1;
    }
    tap += width;
    const bool last = tap == tap1;
    if (last && bias >= 0) {  // the bias row added to the sum
      const int biasAt = rowOperand(bias, 0);
      Step add;
      add.inst = makeInst(vxm, Opcode::kVxmBinary, rows);
      add.inst.func = isa::VxmFunc::kAdd;
      add.inst.timingOnly = !computes;
      add.producer = aluAt;
      add.producer2 = biasAt;
      task.steps.push_back(add);
      aluAt = static_cast<int>(task.steps.size()) - 1;
    }
    if (last && finish != isa::VxmFunc::kNone) {  // one more ALU step on the result (a deferred ReLU)
      Step alu;
      alu.inst = makeInst(vxm, Opcode::kVxmUnary, rows);
      alu.inst.func = finish;
      alu.inst.timingOnly = !computes;
      alu.producer = aluAt;
      task.steps.push_back(alu);
      aluAt = static_cast<int>(task.steps.size()) - 1;
    }
    // The last pass writes finalWrite once per copy of the output (finalWrites: one Access per copy).
    const int writeAt = static_cast<int>(task.steps.size());
    if (!last) task.steps.push_back(makeWriteOf(to, rows, aluAt));
    for (int c = 0; last && c < static_cast<int>(finalWrites.size()); ++c) task.steps.push_back(finalWrite(aluAt, c));
    std::vector<Access> writes;
    if (last)
      for (size_t c = 0; c < finalWrites.size(); ++c)
        if (finalWrites[c].tensor >= 0) {  // (scratch, tensor -1: its caller keeps track)
          Access w = finalWrites[c];
          w.step = writeAt + static_cast<int>(c);
          writes.push_back(w);
        }
    const int id = addTask(std::move(task), reads, writes);
    if (!last) waitForFreedReaders(to, id, writeAt);
    if (pass > 0) {
      problem_.addDataDependence(chain.task, chain.writeStep, id, sideAt);
      readers[(pass + 1) % 2].push_back({id, sideAt});
      // The partial written now was read by the previous pass (write after read); the last pass
      // writes finalWrite instead.
      if (!last)
        for (const auto& [rt, rs] : readers[pass % 2]) problem_.addDependence({rt, rs, id, writeAt, Cycle{rows}});
    }
    chain = {id, writeAt};
  }
  for (int p = 0; p < 2; ++p) opScratch_.push_back({partial[p], readers[p]});
  return chain;
}

Status Lowering::lowerDepthwiseConv(const ir::Op& op) {
  // Channels along the lanes: every channel's output is its own input window times its own taps,
  // one VXM pass per tap (tapPasses) multiplying the tap's pixels by the tap's weight row (weights
  // [C, 1, kh, kw] stored as kh*kw rows of C) and adding the partial; the bias joins the last pass.
  const ir::TensorId in = op.inputs[0], weights = op.inputs[1], out = op.outputs[0];
  const ir::TensorId bias = op.inputs.size() > 2 ? op.inputs[2] : -1;
  alloc::SliceSet avoid = slicesOf(in);
  avoid.insert(slicesOf(weights));
  if (bias >= 0) {
    if (auto s = place(bias, graph_.tensor(bias).producer < 0, avoid); !s) return s;
    avoid.insert(slicesOf(bias));
  }
  if (auto s = place(out, false, avoid); !s) return s;
  avoid.insert(slicesOf(out));
  const Window win = windowOf(graph_, op);
  const ir::DType type = graph_.tensor(in).dtype;
  const bool computes = storageTypeComputes(type) && graph_.tensor(weights).dtype == type &&
                        (bias < 0 || graph_.tensor(bias).dtype == type);
  if (!computes)
    timingReason_ = fmt::format("its taps and weights are FP16 or INT8 of one type, not {} and {}", ir::dtypeName(type),
                                ir::dtypeName(graph_.tensor(weights).dtype));
  const TensorState& ys = tensors_.at(out);
  for (int t = 0; t < ys.placement.tiles; ++t)
    for (const auto& block : windowBlocks(win, in, {out}, chip_.addressesPerSlice)) {
      std::vector<Access> writes;
      for (int c = 0; c < ys.placement.replicas; ++c) writes.push_back({out, t, block[1], block[2], 0, c});
      auto chain = tapPasses(op.name, win, in, t, block, 0, win.taps(), false, isa::VxmFunc::kMul, isa::VxmFunc::kAdd,
                             computes, 0.0f,
                             [&](int producer, int c) { return writeStep(out, t, block[1], block[2], producer, c); },
                             writes, avoid, 0.0f, isa::VxmFunc::kNone, weights, bias);
      if (!chain) return chain.error();
    }
  return {};
}

Status Lowering::lowerPool(const ir::Op& op) {
  // Per channel tile and block of output pixels, one pass per tap (tapPasses): max compares, average
  // adds (the first tap copies, scaled for the average); the last tap writes every copy of the output.
  const ir::TensorId in = op.inputs[0], out = op.outputs[0];
  if (graph_.tensor(in).shape.size() != 4)
    return modelError(op.name, fmt::format("{} over {} spatial dimensions cannot be lowered (2-D only)",
                                           ir::opKindName(op.kind), graph_.tensor(in).shape.size() - 2));
  if (auto s = place(out, false, slicesOf(in)); !s) return s;
  const Window win = windowOf(graph_, op);
  const bool average = op.kind == ir::OpKind::kAveragePool;
  alloc::SliceSet avoid = slicesOf(in);
  avoid.insert(slicesOf(out));
  const TensorState& ys = tensors_.at(out);
  for (int t = 0; t < ys.placement.tiles; ++t)
    for (const auto& block : windowBlocks(win, in, {out}, chip_.addressesPerSlice)) {
      std::vector<Access> writes;
      for (int c = 0; c < ys.placement.replicas; ++c) writes.push_back({out, t, block[1], block[2], 0, c});
      // Max: the first tap copies, each further one keeps the larger; padding is the lowest value.
      // Average: every tap scaled by 1 / taps and added to the partial (padding is 0), computed when
      // the divisor is the kernel's size: no padding, or padding that counts (count_include_pad).
      const float lowest = ir::dtypeBytes(graph_.tensor(in).dtype) == 1 ? -128.0f : -65504.0f;
      const ir::DType type = graph_.tensor(in).dtype;
      const bool computes = storageTypeComputes(type) &&
                            (!average || ((win.inside() || op.intAttr("count_include_pad", 0) != 0) &&
                                          op.intAttr("ceil_mode", 0) == 0 && ir::isFloat(type)));
      if (!computes)
        timingReason_ = !storageTypeComputes(type) ? fmt::format("its window taps are FP16 or INT8, not {}", ir::dtypeName(type))
                        : ir::isFloat(type)
                            ? "an average pool whose divisor is not the kernel's size (padding that does not count) is "
                              "timed, not computed"
                            : "an integer average pool (its 1 / taps scale has no integer form) is timed, not computed";
      auto chain = tapPasses(op.name, win, in, t, block, 0, win.taps(), false,
                             average ? isa::VxmFunc::kScaleAdd : isa::VxmFunc::kConvert,
                             average ? isa::VxmFunc::kScaleAdd : isa::VxmFunc::kMax, computes, average ? 0.0f : lowest,
                             [&](int producer, int c) { return writeStep(out, t, block[1], block[2], producer, c); },
                             writes, avoid, average ? 1.0f / static_cast<float>(win.taps()) : 0.0f,
                             poolRelu_.count(in) ? isa::VxmFunc::kRelu : isa::VxmFunc::kNone);
      if (!chain) return chain.error();
    }
  return {};
}

}  // namespace detail
}  // namespace tsp::lower
