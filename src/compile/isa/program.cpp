// The Program: latencies from the chip spec, canonical order, and the versioned on-disk form.
#include "compile/isa/program.h"

#include <algorithm>
#include <array>
#include <cstring>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace tsp::isa {

using topology::UnitKind;

static_assert(sizeof(Instruction) == 64, "an instruction stays 64 bytes (the simulator's working set)");

const char* opcodeName(Opcode op) {
  switch (op) {
    case Opcode::kNop: return "Nop";
    case Opcode::kMemRead: return "MemRead";
    case Opcode::kMemWrite: return "MemWrite";
    case Opcode::kVxmUnary: return "VxmUnary";
    case Opcode::kVxmBinary: return "VxmBinary";
    case Opcode::kMxmInstall: return "MxmInstall";
    case Opcode::kMxmCompute: return "MxmCompute";
    case Opcode::kSxmShift: return "SxmShift";
    case Opcode::kC2cSend: return "C2cSend";
    case Opcode::kC2cReceive: return "C2cReceive";
    case Opcode::kC2cForward: return "C2cForward";
    case Opcode::kCount: break;
  }
  return "?";
}

const char* vxmFuncName(VxmFunc func) {
  switch (func) {
    case VxmFunc::kNone: return "";
    case VxmFunc::kAdd: return "add";
    case VxmFunc::kSub: return "sub";
    case VxmFunc::kMul: return "mul";
    case VxmFunc::kRelu: return "relu";
    case VxmFunc::kGelu: return "gelu";
    case VxmFunc::kTanh: return "tanh";
    case VxmFunc::kExp: return "exp";
    case VxmFunc::kRsqrt: return "rsqrt";
    case VxmFunc::kConvert: return "convert";
    case VxmFunc::kDiv: return "div";
    case VxmFunc::kSigmoid: return "sigmoid";
    case VxmFunc::kSqrt: return "sqrt";
    case VxmFunc::kErf: return "erf";
    case VxmFunc::kPow: return "pow";
    case VxmFunc::kMax: return "max";
    case VxmFunc::kAccumulate: return "accumulate";
    case VxmFunc::kEmit: return "emit";
    case VxmFunc::kNormalize: return "normalize";
    case VxmFunc::kScaleAdd: return "scale_add";
    case VxmFunc::kEqual: return "equal";
    case VxmFunc::kMaskSet: return "mask_set";
    case VxmFunc::kMaskClear: return "mask_clear";
    case VxmFunc::kNeg: return "neg";
    case VxmFunc::kAbs: return "abs";
    case VxmFunc::kReciprocal: return "reciprocal";
    case VxmFunc::kFloor: return "floor";
    case VxmFunc::kCeil: return "ceil";
    case VxmFunc::kLog: return "log";
    case VxmFunc::kSin: return "sin";
    case VxmFunc::kCos: return "cos";
    case VxmFunc::kNot: return "not";
    case VxmFunc::kSoftplus: return "softplus";
    case VxmFunc::kLeakyRelu: return "leaky_relu";
    case VxmFunc::kElu: return "elu";
    case VxmFunc::kHardSigmoid: return "hard_sigmoid";
    case VxmFunc::kHardSwish: return "hard_swish";
    case VxmFunc::kMin: return "min";
    case VxmFunc::kMod: return "mod";
    case VxmFunc::kFmod: return "fmod";
    case VxmFunc::kLess: return "less";
    case VxmFunc::kGreater: return "greater";
    case VxmFunc::kLessOrEqual: return "less_or_equal";
    case VxmFunc::kGreaterOrEqual: return "greater_or_equal";
    case VxmFunc::kAnd: return "and";
    case VxmFunc::kOr: return "or";
  }
  return "?";
}

UnitKind unitKindOf(Opcode op) {
  switch (op) {
    case Opcode::kMemRead: case Opcode::kMemWrite: return UnitKind::kMem;
    case Opcode::kVxmUnary: case Opcode::kVxmBinary: return UnitKind::kVxm;
    case Opcode::kMxmInstall: case Opcode::kMxmCompute: return UnitKind::kMxm;
    case Opcode::kSxmShift: return UnitKind::kSxm;
    case Opcode::kC2cSend: case Opcode::kC2cReceive: case Opcode::kC2cForward: return UnitKind::kC2c;
    default: return UnitKind::kMem;
  }
}

Cycle resultLatency(const topology::ChipSpec& chip, const Instruction& inst) {
  switch (inst.op) {
    case Opcode::kNop: return 0;
    case Opcode::kMemRead: return chip.memReadCycles;
    case Opcode::kMemWrite: return chip.memWriteCycles;
    case Opcode::kVxmUnary: case Opcode::kVxmBinary: return chip.vxmCycles;
    case Opcode::kMxmInstall: return chip.mxmWeightInstallCycles;
    case Opcode::kMxmCompute: return chip.mxmCycles;
    case Opcode::kSxmShift: return chip.sxmCycles;
    case Opcode::kC2cSend: return chip.c2cSendCycles;
    case Opcode::kC2cReceive: return chip.c2cReceiveCycles;
    case Opcode::kC2cForward: return chip.c2cForwardCycles;
    case Opcode::kCount: break;
  }
  return 0;
}

Cycle busyPerIssue(const topology::ChipSpec& chip, const Instruction& inst) {
  // A weight install holds its queue until the tile is in the plane; everything else issues once per cycle.
  if (inst.op == Opcode::kMxmInstall) return chip.mxmWeightInstallCycles;
  if (inst.op == Opcode::kNop) return inst.interval;
  return 1;
}

Cycle completion(const topology::ChipSpec& chip, const Instruction& inst) {
  return inst.issue + Cycle{inst.repeat - 1} * inst.interval + resultLatency(chip, inst);
}

Cycle unitFreeAt(const topology::ChipSpec& chip, const Instruction& inst) {
  return inst.issue + Cycle{inst.repeat - 1} * inst.interval + busyPerIssue(chip, inst);
}

void attributeAll(Program& program, const OpOrigin& origin) {
  program.origins = {origin};
  program.originOf.assign(program.instructions.size(), 0);
}

void canonicalize(Program& program) {
  const auto before = [](const Instruction& a, const Instruction& b) {
    return a.issue != b.issue ? a.issue < b.issue : a.unit < b.unit;
  };
  if (program.originOf.size() != program.instructions.size()) {
    program.originOf.clear();
    std::stable_sort(program.instructions.begin(), program.instructions.end(), before);
    return;
  }
  // Sorted as (instruction, origin) pairs, so that each keeps its origin.
  std::vector<size_t> order(program.instructions.size());
  for (size_t k = 0; k < order.size(); ++k) order[k] = k;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return before(program.instructions[a], program.instructions[b]); });
  std::vector<Instruction> instructions;
  std::vector<std::int32_t> originOf;
  instructions.reserve(order.size());
  originOf.reserve(order.size());
  for (size_t k : order) {
    instructions.push_back(program.instructions[k]);
    originOf.push_back(program.originOf[k]);
  }
  program.instructions = std::move(instructions);
  program.originOf = std::move(originOf);
}

namespace {

// Origin ids in range, one per instruction (or none).
bool originsValid(const Program& program) {
  if (!program.originOf.empty() && program.originOf.size() != program.instructions.size()) return false;
  for (std::int32_t id : program.originOf)
    if (id < -1 || id >= static_cast<std::int32_t>(program.origins.size())) return false;
  return true;
}

nlohmann::json toJson(const Instruction& i) {
  auto j = nlohmann::json::array({i.unit, i.issue, static_cast<int>(i.op), static_cast<int>(i.func), i.src.id,
                                static_cast<int>(i.src.dir), i.src2.id, static_cast<int>(i.src2.dir), i.dst.id,
                                static_cast<int>(i.dst.dir), i.address, i.bank, i.stride, i.port, i.repeat,
                                i.interval});
  // The functional fields follow only when set, so that programs without them keep their form and hash.
  if (i.hasFunctionalFields())
    for (int v : {i.weightUnit, i.weightRows, static_cast<int>(i.sxm), i.timingOnly ? 1 : 0}) j.push_back(v);
  if (i.operand >= 0) j.push_back(i.operand);
  return j;
}

Instruction fromJson(const nlohmann::json& j) {
  Instruction i;
  i.unit = j.at(0);
  i.issue = j.at(1);
  i.op = static_cast<Opcode>(j.at(2).get<int>());
  i.func = static_cast<VxmFunc>(j.at(3).get<int>());
  i.src = {j.at(4).get<std::int16_t>(), static_cast<Direction>(j.at(5).get<int>())};
  i.src2 = {j.at(6).get<std::int16_t>(), static_cast<Direction>(j.at(7).get<int>())};
  i.dst = {j.at(8).get<std::int16_t>(), static_cast<Direction>(j.at(9).get<int>())};
  i.address = j.at(10);
  i.bank = j.at(11);
  i.stride = j.at(12);
  i.port = j.at(13);
  i.repeat = j.at(14);
  i.interval = j.at(15);
  if (j.size() > 16) {
    i.weightUnit = j.at(16);
    i.weightRows = j.at(17);
    i.sxm = static_cast<SxmFunc>(j.at(18).get<int>());
    i.timingOnly = j.at(19).get<int>() != 0;
  }
  if (j.size() > 20) i.operand = j.at(20);
  return i;
}

nlohmann::json toJson(const FunctionalOperand& o) {
  nlohmann::json j = {o.accumulator, o.tile, o.row0, o.immediate, o.splatA ? 1 : 0, o.splatB ? 1 : 0, o.window,
                      o.immediate2, o.transposed ? 1 : 0, o.laneShift, o.laneCount, o.map};
  // Only when set: programs without them keep their text and hash.
  if (o.window2 >= 0 || o.types != 0) j.push_back(o.window2);
  if (o.types != 0) j.push_back(o.types);
  return j;
}

FunctionalOperand operandFromJson(const nlohmann::json& j) {
  FunctionalOperand o;
  o.accumulator = j.at(0);
  o.tile = j.at(1);
  o.row0 = j.at(2);
  o.immediate = j.at(3);
  o.splatA = j.at(4).get<int>() != 0;
  o.splatB = j.at(5).get<int>() != 0;
  if (j.size() > 6) o.window = j.at(6);
  if (j.size() > 8) {
    o.immediate2 = j.at(7);
    o.transposed = j.at(8).get<int>() != 0;
  }
  if (j.size() > 10) {
    o.laneShift = j.at(9);
    o.laneCount = j.at(10);
  }
  if (j.size() > 11) o.map = j.at(11);
  if (j.size() > 12) o.window2 = j.at(12);
  if (j.size() > 13) o.types = j.at(13);
  return o;
}

nlohmann::json toJson(const WindowRead& w) {
  return {w.h,  w.w,  w.ho, w.wo,     w.sh,    w.sw,     w.dh,        w.dw,    w.pt,
          w.pl, w.ky, w.kx, w.pixel0, w.first, w.stride, w.laneShift, w.lanes, w.fill};
}

WindowRead windowFromJson(const nlohmann::json& j) {
  WindowRead w;
  std::int64_t* fields[] = {&w.h,  &w.w,  &w.ho, &w.wo, &w.sh,     &w.sw,    &w.dh,
                            &w.dw, &w.pt, &w.pl, &w.ky, &w.kx, &w.pixel0, &w.first, &w.stride};
  for (size_t k = 0; k < std::size(fields); ++k) *fields[k] = j.at(k);
  w.laneShift = j.at(15);
  w.lanes = j.at(16);
  w.fill = j.at(17);
  return w;
}

nlohmann::json toJson(const ElementMap& m) {
  return {{"sources", m.sources}, {"source_dims", m.sourceDims}, {"out_dims", m.outDims}, {"out_cols", m.outCols},
          {"source_cols", m.sourceCols}, {"from", m.from},
          {"starts", m.starts},   {"steps", m.steps},            {"concat_axis", m.concatAxis},
          {"offsets", m.offsets}, {"indices", m.indices},        {"index_dims", m.indexDims},
          {"index_axis", m.indexAxis}};
}

ElementMap mapFromJson(const nlohmann::json& j) {
  ElementMap m;
  m.sources = j.at("sources").get<std::vector<std::string>>();
  m.sourceDims = j.at("source_dims").get<std::vector<std::int64_t>>();
  m.outDims = j.at("out_dims").get<std::vector<std::int64_t>>();
  m.outCols = j.at("out_cols");
  m.sourceCols = j.at("source_cols").get<std::vector<std::int64_t>>();
  m.from = j.at("from").get<std::vector<std::int64_t>>();
  m.starts = j.at("starts").get<std::vector<std::int64_t>>();
  m.steps = j.at("steps").get<std::vector<std::int64_t>>();
  m.concatAxis = j.at("concat_axis");
  m.offsets = j.at("offsets").get<std::vector<std::int64_t>>();
  m.indices = j.at("indices");
  m.indexDims = j.at("index_dims").get<std::vector<std::int64_t>>();
  m.indexAxis = j.at("index_axis");
  return m;
}

nlohmann::json toJson(const WeightFold& f) {
  return {{"tensor", f.tensor}, {"kind", static_cast<int>(f.kind)}, {"source", f.source}, {"gamma", f.gamma},
          {"beta", f.beta},     {"mean", f.mean},                   {"var", f.var},       {"epsilon", f.epsilon}};
}

WeightFold foldFromJson(const nlohmann::json& j) {
  WeightFold f;
  f.tensor = j.at("tensor");
  f.kind = static_cast<WeightFold::Kind>(j.at("kind").get<int>());
  f.source = j.at("source");
  f.gamma = j.at("gamma");
  f.beta = j.at("beta");
  f.mean = j.at("mean");
  f.var = j.at("var");
  f.epsilon = j.at("epsilon");
  return f;
}

nlohmann::json toJson(const Accumulator& a) {
  return {{"kind", static_cast<int>(a.kind)}, {"dims", a.dims},       {"reduced", a.reduced},
          {"out_cols", a.outCols},           {"divisor", a.divisor}, {"epsilon", a.epsilon}};
}

Accumulator accumulatorFromJson(const nlohmann::json& j) {
  Accumulator a;
  a.kind = static_cast<Accumulator::Kind>(j.at("kind").get<int>());
  a.dims = j.at("dims").get<std::vector<std::int64_t>>();
  a.reduced = j.at("reduced").get<std::vector<std::uint8_t>>();
  a.outCols = j.at("out_cols");
  a.divisor = j.at("divisor");
  a.epsilon = j.at("epsilon");
  return a;
}

nlohmann::json toJson(const TensorPlacement& t) {
  return {{"name", t.name}, {"dtype", t.dtype},     {"rows", t.rows},
          {"tiles", t.tiles}, {"segment_rows", t.segmentRows}, {"replicas", t.replicas}, {"mem_unit", t.memUnit}, {"address", t.address},
          {"resident", t.resident}};
}

TensorPlacement placementFromJson(const nlohmann::json& j) {
  TensorPlacement t;
  t.name = j.at("name");
  t.dtype = j.at("dtype");
  t.rows = j.at("rows");
  t.tiles = j.at("tiles");
  t.segmentRows = j.at("segment_rows");
  t.replicas = j.at("replicas");
  t.memUnit = j.at("mem_unit").get<std::vector<std::int32_t>>();
  t.address = j.at("address").get<std::vector<std::int32_t>>();
  t.resident = j.at("resident");
  return t;
}

}  // namespace

namespace {

// Output element f's coordinates over the map's output shape.
void unravel(const ElementMap& map, std::int64_t f, std::int64_t* coord) {
  for (size_t d = map.outDims.size(); d-- > 0;) {
    coord[d] = f % map.outDims[d];
    f /= map.outDims[d];
  }
}

}  // namespace

std::int64_t indexElementOf(const ElementMap& map, std::int64_t f) {
  std::vector<std::int64_t> coord(map.outDims.size());
  unravel(map, f, coord.data());
  std::int64_t at = 0;
  for (size_t d = 0; d < map.indexDims.size(); ++d)
    at = at * map.indexDims[d] + coord[static_cast<size_t>(map.indexAxis) + d];
  return at;
}

std::pair<size_t, std::int64_t> sourceElementOf(const ElementMap& map, std::int64_t f, std::int64_t index) {
  const size_t rank = map.from.size();
  // Coordinates on the stack for the usual ranks (this runs once per element of a permute).
  constexpr size_t kSmall = 8;
  std::int64_t coordSmall[kSmall], srcSmall[kSmall];
  std::vector<std::int64_t> coordBig, srcBig;
  std::int64_t* coord = coordSmall;
  std::int64_t* src = srcSmall;
  if (map.outDims.size() > kSmall || rank > kSmall) {
    coordBig.resize(map.outDims.size());
    srcBig.resize(rank);
    coord = coordBig.data();
    src = srcBig.data();
  }
  unravel(map, f, coord);
  for (size_t s = 0; s < rank; ++s)
    src[s] = static_cast<std::int32_t>(s) == map.indexAxis && !map.indices.empty()
                 ? index
                 : map.starts[s] + map.steps[s] * coord[static_cast<size_t>(map.from[s])];
  size_t k = 0;
  if (map.concatAxis >= 0) {
    const auto axis = static_cast<size_t>(map.concatAxis);
    while (k + 1 < map.offsets.size() && src[axis] >= map.offsets[k + 1]) ++k;
    src[axis] -= map.offsets[k];
  }
  const std::int64_t* dims = map.sourceDims.data() + k * rank;
  std::int64_t flat = 0;
  for (size_t s = 0; s < rank; ++s) flat = flat * dims[s] + src[s];
  return {k, flat};
}

std::string serialize(const Program& program) {
  if (!program.pieces.empty()) return serialize(expanded(program));
  nlohmann::json doc;
  doc["format"] = "tsp-program";
  doc["version"] = program.version;
  doc["chip_spec_hash"] = fmt::format("{:016x}", program.chipSpecHash);
  doc["predicted_cycles"] = program.predictedCycles;
  doc["lower_bound_cycles"] = program.lowerBoundCycles;
  doc["sram_bytes"] = program.sramBytes;
  doc["fields"] = "unit,issue,opcode,func,src,src_dir,src2,src2_dir,dst,dst_dir,address,bank,stride,port,repeat,interval"
                   "[,weight_unit,weight_rows,sxm,timing_only[,operand]]";
  auto& list = doc["instructions"] = nlohmann::json::array();
  for (const auto& inst : program.instructions) list.push_back(toJson(inst));
  auto& tensors = doc["tensors"] = nlohmann::json::array();
  for (const auto& t : program.tensors) tensors.push_back(toJson(t));
  // The functional tables follow only when present, so that programs without them keep their form and hash.
  if (!program.operands.empty()) {
    auto& operands = doc["operands"] = nlohmann::json::array();
    for (const auto& o : program.operands) operands.push_back(toJson(o));
  }
  if (!program.accumulators.empty()) {
    auto& accumulators = doc["accumulators"] = nlohmann::json::array();
    for (const auto& a : program.accumulators) accumulators.push_back(toJson(a));
  }
  if (!program.windows.empty()) {
    auto& windows = doc["windows"] = nlohmann::json::array();
    for (const auto& w : program.windows) windows.push_back(toJson(w));
  }
  if (!program.folds.empty()) {
    auto& folds = doc["folds"] = nlohmann::json::array();
    for (const auto& f : program.folds) folds.push_back(toJson(f));
  }
  if (!program.maps.empty()) {
    auto& maps = doc["maps"] = nlohmann::json::array();
    for (const auto& m : program.maps) maps.push_back(toJson(m));
  }
  if (!program.refusals.empty()) doc["refusals"] = program.refusals;
  if (!program.origins.empty()) {
    auto& origins = doc["origins"] = nlohmann::json::array();
    for (const auto& o : program.origins) {
      auto row = nlohmann::json::array({o.op, o.kind, o.layer, o.tensor});
      // The input as a fifth entry only when known; its producer and the instance after it only when set.
      const bool instanced = !o.inputProducer.empty() || o.instance != -1;
      if (!o.input.empty() || instanced) row.push_back(o.input);
      if (instanced) {
        row.push_back(o.inputProducer);
        row.push_back(o.instance);
      }
      origins.push_back(std::move(row));
    }
    doc["origin_of"] = program.originOf;
  }
  return doc.dump();
}

Expected<Program> deserialize(const std::string& text, const topology::ChipSpec& chip, const std::string& file) {
  auto fail = [&](const std::string& message) {
    return makeError(ExitCode::kConfig, fmt::format("{}: {}", file, message));
  };
  nlohmann::json doc = nlohmann::json::parse(text, nullptr, false);
  if (doc.is_discarded() || !doc.is_object() || doc.value("format", "") != "tsp-program")
    return fail("not a tsp-sim program file");
  Program program;
  program.version = doc.value("version", 0);
  if (program.version != kProgramVersion)
    return fail(fmt::format("program format version {} is not supported (this build reads {})", program.version,
                            kProgramVersion));
  const std::string hash = doc.value("chip_spec_hash", "");
  if (hash != fmt::format("{:016x}", chip.hash()))
    return fail(fmt::format("program was compiled for another chip (spec hash {} , this chip {:016x})", hash, chip.hash()));
  program.chipSpecHash = chip.hash();
  try {
    program.predictedCycles = doc.at("predicted_cycles");
    program.lowerBoundCycles = doc.at("lower_bound_cycles");
    program.sramBytes = doc.at("sram_bytes");
    for (const auto& j : doc.at("instructions")) program.instructions.push_back(fromJson(j));
    for (const auto& j : doc.at("tensors")) program.tensors.push_back(placementFromJson(j));
    if (doc.contains("operands"))
      for (const auto& j : doc.at("operands")) program.operands.push_back(operandFromJson(j));
    if (doc.contains("accumulators"))
      for (const auto& j : doc.at("accumulators")) program.accumulators.push_back(accumulatorFromJson(j));
    if (doc.contains("windows"))
      for (const auto& j : doc.at("windows")) program.windows.push_back(windowFromJson(j));
    if (doc.contains("folds"))
      for (const auto& j : doc.at("folds")) program.folds.push_back(foldFromJson(j));
    if (doc.contains("maps"))
      for (const auto& j : doc.at("maps")) program.maps.push_back(mapFromJson(j));
    if (doc.contains("refusals"))
      for (const auto& j : doc.at("refusals")) program.refusals.push_back(j.get<std::string>());
    if (doc.contains("origins")) {
      for (const auto& j : doc.at("origins"))
        program.origins.push_back({j.at(0).get<std::string>(), j.at(1).get<std::string>(), j.at(2).get<std::int32_t>(),
                                   j.at(3).get<std::string>(), j.size() > 4 ? j.at(4).get<std::string>() : std::string(),
                                   j.size() > 5 ? j.at(5).get<std::string>() : std::string(),
                                   j.size() > 6 ? j.at(6).get<std::int32_t>() : -1});
      program.originOf = doc.at("origin_of").get<std::vector<std::int32_t>>();
    }
  } catch (const nlohmann::json::exception& e) {
    return fail(fmt::format("malformed program: {}", e.what()));
  }
  if (!originsValid(program)) return fail("malformed program: bad origin table");
  return program;
}

namespace {

constexpr char kBinaryMagic[8] = {'T', 'S', 'P', 'P', 'R', 'O', 'G', '\0'};
// Opens the optional functional section after the tensor table ("FUNC" little-endian).
constexpr std::uint32_t kFunctionalTag = 0x434e5546u;
// Opens the optional table of second-operand windows after the functional section ("WIN2"):
// (operand, window2) pairs, only when some operand has one, so that other programs keep their bytes.
constexpr std::uint32_t kWindow2Tag = 0x324e4957u;
// Then the element types of mixed-type VXM operands ("TYP3": (operand, types) pairs) and the ops
// functional mode refuses ("REFU": texts), each only when there is one.
constexpr std::uint32_t kTypesTag = 0x33505954u;
constexpr std::uint32_t kRefusalsTag = 0x55464552u;
// Opens the optional op origins after the tensor table ("ORIG"): the names, then one id per instruction.
constexpr std::uint32_t kOriginsTag = 0x4749524fu;
// Then, only when some origin names one, the origins' read inputs (OpOrigin::input, "OINP"): one text per origin.
constexpr std::uint32_t kOriginInputsTag = 0x504e494fu;
// Then, only when some origin sets one, the inputs' producers and the instances (OpOrigin::inputProducer,
// instance; "OINS"): per origin a text and an int32.
constexpr std::uint32_t kOriginInstancesTag = 0x534e494fu;

// Appends fixed-width little-endian integers (the build hosts are little-endian; the magic would
// not match on a big-endian reader, which then refuses the file instead of misreading it).
// The binary form's bytes, kept (a file's contents) or only hashed as they come (Program::contentHash,
// which would otherwise build a string as large as the program to hash it).
class ByteWriter {
 public:
  explicit ByteWriter(bool hashOnly = false) : hashOnly_(hashOnly) {}
  template <typename T>
  void put(T value) {
    static_assert(sizeof(T) <= sizeof(std::uint64_t));
    if (hashOnly_) {
      std::uint64_t word = 0;
      std::memcpy(&word, &value, sizeof(T));
      mix(word ^ (std::uint64_t{sizeof(T)} << 56));
      return;
    }
    char raw[sizeof(T)];
    std::memcpy(raw, &value, sizeof(T));
    out_.append(raw, sizeof(T));
  }
  void putText(const std::string& text) {
    put<std::uint32_t>(static_cast<std::uint32_t>(text.size()));
    raw(text.data(), text.size());
  }
  std::string take() { return std::move(out_); }
  void raw(const char* data, size_t n) {
    if (!hashOnly_) {
      out_.append(data, n);
      return;
    }
    for (size_t at = 0; at < n; at += sizeof(std::uint64_t)) {
      std::uint64_t word = 0;
      std::memcpy(&word, data + at, std::min(sizeof word, n - at));
      mix(word);
    }
  }
  /// The hash of what a hash-only writer was given.
  std::uint64_t hash() const { return hash_ ^ (hash_ >> 31); }

 private:
  void mix(std::uint64_t word) {
    hash_ = (hash_ ^ word) * 0x9E3779B97F4A7C15ULL;
    hash_ ^= hash_ >> 29;
  }
  bool hashOnly_;
  std::string out_;
  std::uint64_t hash_ = 1469598103934665603ULL;
};

class ByteReader {
 public:
  explicit ByteReader(const std::string& in) : in_(in) {}
  template <typename T>
  bool get(T& value) {
    if (pos_ + sizeof(T) > in_.size()) return false;
    std::memcpy(&value, in_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return true;
  }
  bool getText(std::string& text) {
    std::uint32_t n = 0;
    if (!get(n) || pos_ + n > in_.size()) return false;
    text.assign(in_.data() + pos_, n);
    pos_ += n;
    return true;
  }
  bool done() const { return pos_ == in_.size(); }

 private:
  const std::string& in_;
  size_t pos_ = 0;
};

void putRef(ByteWriter& w, StreamRef r) {
  w.put<std::int16_t>(r.id);
  w.put<std::uint8_t>(static_cast<std::uint8_t>(r.dir));
}

bool getRef(ByteReader& r, StreamRef& ref) {
  std::uint8_t dir = 0;
  if (!r.get(ref.id) || !r.get(dir) || dir > 1) return false;
  ref.dir = static_cast<Direction>(dir);
  return true;
}

}  // namespace

namespace {

// The binary form of a program without pieces into w.
void writeBinary(ByteWriter& w, const Program& program) {
  w.raw(kBinaryMagic, sizeof kBinaryMagic);
  w.put<std::int32_t>(program.version);
  w.put<std::uint64_t>(program.chipSpecHash);
  w.put<std::int64_t>(program.predictedCycles);
  w.put<std::int64_t>(program.lowerBoundCycles);
  w.put<std::int64_t>(program.sramBytes);
  w.put<std::uint64_t>(program.instructions.size());
  for (const auto& i : program.instructions) {
    w.put<std::int32_t>(i.unit);
    w.put<std::int64_t>(i.issue);
    w.put<std::uint8_t>(static_cast<std::uint8_t>(i.op));
    w.put<std::uint8_t>(static_cast<std::uint8_t>(i.func));
    putRef(w, i.src);
    putRef(w, i.src2);
    putRef(w, i.dst);
    for (std::int32_t v : {i.address, i.bank, i.stride, i.port, i.repeat, i.interval}) w.put<std::int32_t>(v);
    w.put<std::int32_t>(i.weightUnit);
    w.put<std::int32_t>(i.weightRows);
    w.put<std::uint8_t>(static_cast<std::uint8_t>(i.sxm));
    w.put<std::uint8_t>(i.timingOnly ? 1 : 0);
  }
  w.put<std::uint64_t>(program.tensors.size());
  for (const auto& t : program.tensors) {
    w.putText(t.name);
    w.put<std::int32_t>(t.dtype);
    w.put<std::int64_t>(t.rows);
    w.put<std::int32_t>(t.tiles);
    w.put<std::int64_t>(t.segmentRows);
    w.put<std::int32_t>(t.replicas);
    for (size_t k = 0; k < t.memUnit.size(); ++k) {
      w.put<std::int32_t>(t.memUnit[k]);
      w.put<std::int32_t>(t.address[k]);
    }
    w.put<std::uint8_t>(t.resident ? 1 : 0);
  }
  if (!program.origins.empty()) {
    w.put<std::uint32_t>(kOriginsTag);
    w.put<std::uint64_t>(program.origins.size());
    for (const auto& o : program.origins) {
      w.putText(o.op);
      w.putText(o.kind);
      w.put<std::int32_t>(o.layer);
      w.putText(o.tensor);
    }
    w.put<std::uint64_t>(program.originOf.size());
    for (std::int32_t id : program.originOf) w.put<std::int32_t>(id);
    if (std::any_of(program.origins.begin(), program.origins.end(), [](const OpOrigin& o) { return !o.input.empty(); })) {
      w.put<std::uint32_t>(kOriginInputsTag);
      for (const auto& o : program.origins) w.putText(o.input);
    }
    if (std::any_of(program.origins.begin(), program.origins.end(),
                    [](const OpOrigin& o) { return !o.inputProducer.empty() || o.instance != -1; })) {
      w.put<std::uint32_t>(kOriginInstancesTag);
      for (const auto& o : program.origins) {
        w.putText(o.inputProducer);
        w.put<std::int32_t>(o.instance);
      }
    }
  }
  // The functional section, only when there is one: (instruction, operand) pairs, the operands, the
  // accumulators.
  if (!program.operands.empty() || !program.accumulators.empty() || !program.windows.empty() ||
      !program.folds.empty() || !program.maps.empty() || !program.refusals.empty()) {
    w.put<std::uint32_t>(kFunctionalTag);
    std::uint64_t withOperand = 0;
    for (const auto& i : program.instructions) withOperand += i.operand >= 0 ? 1 : 0;
    w.put<std::uint64_t>(withOperand);
    for (size_t k = 0; k < program.instructions.size(); ++k)
      if (program.instructions[k].operand >= 0) {
        w.put<std::uint64_t>(k);
        w.put<std::int32_t>(program.instructions[k].operand);
      }
    w.put<std::uint64_t>(program.operands.size());
    for (const auto& o : program.operands) {
      w.put<std::int32_t>(o.accumulator);
      w.put<std::int32_t>(o.tile);
      w.put<std::int64_t>(o.row0);
      w.put<float>(o.immediate);
      w.put<std::uint8_t>(static_cast<std::uint8_t>((o.splatA ? 1 : 0) | (o.splatB ? 2 : 0) | (o.transposed ? 4 : 0)));
      w.put<std::int32_t>(o.window);
      w.put<float>(o.immediate2);
      w.put<std::int32_t>(o.laneShift);
      w.put<std::int32_t>(o.laneCount);
      w.put<std::int32_t>(o.map);
    }
    w.put<std::uint64_t>(program.accumulators.size());
    for (const auto& a : program.accumulators) {
      w.put<std::uint8_t>(static_cast<std::uint8_t>(a.kind));
      w.put<std::uint64_t>(a.dims.size());
      for (size_t d = 0; d < a.dims.size(); ++d) {
        w.put<std::int64_t>(a.dims[d]);
        w.put<std::uint8_t>(d < a.reduced.size() ? a.reduced[d] : 0);
      }
      w.put<std::int64_t>(a.outCols);
      w.put<std::int64_t>(a.divisor);
      w.put<double>(a.epsilon);
    }
    w.put<std::uint64_t>(program.windows.size());
    for (const auto& win : program.windows) {
      for (std::int64_t v : {win.h, win.w, win.ho, win.wo, win.sh, win.sw, win.dh, win.dw, win.pt, win.pl, win.ky,
                             win.kx, win.pixel0, win.first, win.stride})
        w.put<std::int64_t>(v);
      w.put<std::int32_t>(win.laneShift);
      w.put<std::int32_t>(win.lanes);
      w.put<float>(win.fill);
    }
    w.put<std::uint64_t>(program.folds.size());
    for (const auto& f : program.folds) {
      w.putText(f.tensor);
      w.put<std::uint8_t>(static_cast<std::uint8_t>(f.kind));
      for (const std::string* text : {&f.source, &f.gamma, &f.beta, &f.mean, &f.var}) w.putText(*text);
      w.put<double>(f.epsilon);
    }
    w.put<std::uint64_t>(program.maps.size());
    for (const auto& m : program.maps) {
      w.put<std::uint64_t>(m.sources.size());
      for (const auto& name : m.sources) w.putText(name);
      w.put<std::int64_t>(m.outCols);
      for (const auto* list : {&m.sourceDims, &m.outDims, &m.sourceCols, &m.from, &m.starts, &m.steps, &m.offsets,
                               &m.indexDims}) {
        w.put<std::uint64_t>(list->size());
        for (std::int64_t v : *list) w.put<std::int64_t>(v);
      }
      w.put<std::int32_t>(m.concatAxis);
      w.putText(m.indices);
      w.put<std::int32_t>(m.indexAxis);
    }
    std::uint64_t withWindow2 = 0;
    for (const auto& o : program.operands) withWindow2 += o.window2 >= 0 ? 1 : 0;
    if (withWindow2 > 0) {
      w.put<std::uint32_t>(kWindow2Tag);
      w.put<std::uint64_t>(withWindow2);
      for (size_t k = 0; k < program.operands.size(); ++k)
        if (program.operands[k].window2 >= 0) {
          w.put<std::uint64_t>(k);
          w.put<std::int32_t>(program.operands[k].window2);
        }
    }
    std::uint64_t typed = 0;
    for (const auto& o : program.operands) typed += o.types != 0 ? 1 : 0;
    if (typed > 0) {  // the element types of mixed-type VXM ops ("TYP3")
      w.put<std::uint32_t>(kTypesTag);
      w.put<std::uint64_t>(typed);
      for (size_t k = 0; k < program.operands.size(); ++k)
        if (program.operands[k].types != 0) {
          w.put<std::uint64_t>(k);
          w.put<std::int32_t>(static_cast<std::int32_t>(program.operands[k].types));
        }
    }
    if (!program.refusals.empty()) {  // "REFU"
      w.put<std::uint32_t>(kRefusalsTag);
      w.put<std::uint64_t>(program.refusals.size());
      for (const auto& text : program.refusals) w.putText(text);
    }
  }
}

}  // namespace

std::string serializeBinary(const Program& program) {
  if (!program.pieces.empty()) return serializeBinary(expanded(program));
  ByteWriter w;
  writeBinary(w, program);
  return w.take();
}

std::uint64_t Program::contentHash() const {
  // The binary form: every field, without building a JSON document (a third of a 256-chip ring
  // all-reduce's run went to hashing its programs through JSON).
  auto binaryHash = [](const Program& program) {
    ByteWriter w(true);
    writeBinary(w, program);
    return w.hash();
  };
  if (pieces.empty()) return binaryHash(*this);
  // The header as a program without instructions, then each piece's body hash and offset.
  Program header = *this;
  header.pieces.clear();
  std::uint64_t hash = binaryHash(header);
  for (const ProgramPiece& piece : pieces) {
    const std::array<std::uint64_t, 2> fields = {piece.body->hash, static_cast<std::uint64_t>(piece.offset)};
    hash = fnv1a(std::string_view(reinterpret_cast<const char*>(fields.data()), sizeof fields), hash);
  }
  return hash;
}

Expected<Program> deserializeBinary(const std::string& bytes, const topology::ChipSpec& chip, const std::string& file) {
  auto fail = [&](const std::string& message) {
    return makeError(ExitCode::kConfig, fmt::format("{}: {}", file, message));
  };
  if (bytes.size() < sizeof kBinaryMagic || std::memcmp(bytes.data(), kBinaryMagic, sizeof kBinaryMagic) != 0)
    return fail("not a tsp-sim binary program file");
  const std::string body = bytes.substr(sizeof kBinaryMagic);
  ByteReader r(body);
  Program program;
  std::int32_t version = 0;
  if (!r.get(version)) return fail("malformed program: truncated header");
  program.version = version;
  if (program.version != kProgramVersion)
    return fail(fmt::format("program format version {} is not supported (this build reads {})", program.version,
                            kProgramVersion));
  std::uint64_t hash = 0;
  if (!r.get(hash)) return fail("malformed program: truncated header");
  if (hash != chip.hash())
    return fail(fmt::format("program was compiled for another chip (spec hash {:016x} , this chip {:016x})", hash,
                            chip.hash()));
  program.chipSpecHash = hash;
  std::uint64_t count = 0;
  if (!r.get(program.predictedCycles) || !r.get(program.lowerBoundCycles) || !r.get(program.sramBytes) ||
      !r.get(count))
    return fail("malformed program: truncated header");
  // Each record takes at least 50 bytes: a count larger than the file is a corrupt header.
  if (count > body.size() / 50) return fail("malformed program: instruction count exceeds the file");
  program.instructions.resize(count);
  for (auto& i : program.instructions) {
    std::uint8_t op = 0, func = 0, sxm = 0, timingOnly = 0;
    bool ok = r.get(i.unit) && r.get(i.issue) && r.get(op) && r.get(func) && getRef(r, i.src) &&
              getRef(r, i.src2) && getRef(r, i.dst) && r.get(i.address) && r.get(i.bank) && r.get(i.stride) &&
              r.get(i.port) && r.get(i.repeat) && r.get(i.interval) && r.get(i.weightUnit) && r.get(i.weightRows) &&
              r.get(sxm) && r.get(timingOnly);
    if (!ok || op >= static_cast<std::uint8_t>(Opcode::kCount) || func > static_cast<std::uint8_t>(kLastVxmFunc) ||
        sxm > static_cast<std::uint8_t>(SxmFunc::kPermute) || timingOnly > 1)
      return fail("malformed program: bad instruction record");
    i.sxm = static_cast<SxmFunc>(sxm);
    i.timingOnly = timingOnly != 0;
    i.op = static_cast<Opcode>(op);
    i.func = static_cast<VxmFunc>(func);
  }
  if (!r.get(count) || count > body.size()) return fail("malformed program: bad tensor table");
  program.tensors.resize(count);
  for (auto& t : program.tensors) {
    std::uint8_t resident = 0;
    if (!r.getText(t.name) || !r.get(t.dtype) || !r.get(t.rows) || !r.get(t.tiles) || !r.get(t.segmentRows) ||
        !r.get(t.replicas) || t.tiles < 0 || t.rows < 0 || t.segmentRows < 0 || t.replicas < 1 ||
        static_cast<size_t>(t.tiles) * t.replicas > body.size())
      return fail("malformed program: bad tensor table");
    const std::int64_t segments = t.segmentRows > 0 ? (t.rows + t.segmentRows - 1) / t.segmentRows : 1;
    if (segments > static_cast<std::int64_t>(body.size())) return fail("malformed program: bad tensor table");
    t.memUnit.resize(static_cast<size_t>(t.tiles * segments * t.replicas));
    t.address.resize(t.memUnit.size());
    for (size_t k = 0; k < t.memUnit.size(); ++k)
      if (!r.get(t.memUnit[k]) || !r.get(t.address[k])) return fail("malformed program: bad tensor table");
    if (!r.get(resident)) return fail("malformed program: bad tensor table");
    t.resident = resident != 0;
  }
  std::uint32_t tag = 0;
  if (!r.done() && r.get(tag) && tag == kOriginsTag) {
    const auto bad = [&] { return fail("malformed program: bad origin table"); };
    if (!r.get(count) || count > body.size()) return bad();
    program.origins.resize(count);
    for (auto& o : program.origins)
      if (!r.getText(o.op) || !r.getText(o.kind) || !r.get(o.layer) || !r.getText(o.tensor)) return bad();
    if (!r.get(count) || count > body.size()) return bad();
    program.originOf.resize(count);
    for (auto& id : program.originOf)
      if (!r.get(id)) return bad();
    if (!originsValid(program)) return bad();
    tag = 0;
    if (!r.done() && !r.get(tag)) return fail("malformed program: trailing bytes");
    if (tag == kOriginInputsTag) {
      for (auto& o : program.origins)
        if (!r.getText(o.input)) return bad();
      tag = 0;
      if (!r.done() && !r.get(tag)) return fail("malformed program: trailing bytes");
    }
    if (tag == kOriginInstancesTag) {
      for (auto& o : program.origins)
        if (!r.getText(o.inputProducer) || !r.get(o.instance)) return bad();
      tag = 0;
      if (!r.done() && !r.get(tag)) return fail("malformed program: trailing bytes");
    }
  }
  if (tag == kFunctionalTag) {
    const auto bad = [&] { return fail("malformed program: bad functional section"); };
    std::uint64_t pairs = 0;
    if (!r.get(pairs) || pairs > program.instructions.size()) return bad();
    for (std::uint64_t p = 0; p < pairs; ++p) {
      std::uint64_t k = 0;
      std::int32_t operand = -1;
      if (!r.get(k) || !r.get(operand) || k >= program.instructions.size() || operand < 0) return bad();
      program.instructions[k].operand = operand;
    }
    if (!r.get(count) || count > body.size()) return bad();
    program.operands.resize(count);
    for (auto& o : program.operands) {
      std::uint8_t splat = 0;
      if (!r.get(o.accumulator) || !r.get(o.tile) || !r.get(o.row0) || !r.get(o.immediate) || !r.get(splat) ||
          splat > 7 || !r.get(o.window) || !r.get(o.immediate2) || !r.get(o.laneShift) || !r.get(o.laneCount) || !r.get(o.map))
        return bad();
      o.splatA = (splat & 1) != 0;
      o.splatB = (splat & 2) != 0;
      o.transposed = (splat & 4) != 0;
    }
    if (!r.get(count) || count > body.size()) return bad();
    program.accumulators.resize(count);
    for (auto& a : program.accumulators) {
      std::uint8_t kind = 0;
      std::uint64_t dims = 0;
      if (!r.get(kind) || kind > static_cast<std::uint8_t>(Accumulator::Kind::kMoments) || !r.get(dims) ||
          dims > body.size())
        return bad();
      a.kind = static_cast<Accumulator::Kind>(kind);
      a.dims.resize(dims);
      a.reduced.resize(dims);
      for (size_t d = 0; d < dims; ++d)
        if (!r.get(a.dims[d]) || !r.get(a.reduced[d])) return bad();
      if (!r.get(a.outCols) || !r.get(a.divisor) || !r.get(a.epsilon)) return bad();
    }
    if (!r.get(count) || count > body.size()) return bad();
    program.windows.resize(count);
    for (auto& win : program.windows) {
      for (std::int64_t* v : {&win.h, &win.w, &win.ho, &win.wo, &win.sh, &win.sw, &win.dh, &win.dw, &win.pt, &win.pl,
                              &win.ky, &win.kx, &win.pixel0, &win.first, &win.stride})
        if (!r.get(*v)) return bad();
      if (!r.get(win.laneShift) || !r.get(win.lanes) || !r.get(win.fill)) return bad();
    }
    if (!r.get(count) || count > body.size()) return bad();
    program.folds.resize(count);
    for (auto& f : program.folds) {
      std::uint8_t kind = 0;
      if (!r.getText(f.tensor) || !r.get(kind) || kind > static_cast<std::uint8_t>(WeightFold::Kind::kScale)) return bad();
      f.kind = static_cast<WeightFold::Kind>(kind);
      for (std::string* text : {&f.source, &f.gamma, &f.beta, &f.mean, &f.var})
        if (!r.getText(*text)) return bad();
      if (!r.get(f.epsilon)) return bad();
    }
    if (!r.get(count) || count > body.size()) return bad();
    program.maps.resize(count);
    for (auto& m : program.maps) {
      std::uint64_t n = 0;
      if (!r.get(n) || n > body.size()) return bad();
      m.sources.resize(n);
      for (auto& name : m.sources)
        if (!r.getText(name)) return bad();
      if (!r.get(m.outCols)) return bad();
      for (auto* list : {&m.sourceDims, &m.outDims, &m.sourceCols, &m.from, &m.starts, &m.steps, &m.offsets,
                         &m.indexDims}) {
        if (!r.get(n) || n > body.size()) return bad();
        list->resize(n);
        for (auto& v : *list)
          if (!r.get(v)) return bad();
      }
      if (!r.get(m.concatAxis) || !r.getText(m.indices) || !r.get(m.indexAxis)) return bad();
    }
    // The optional tables, each opened by its tag, in the order they are written.
    std::uint32_t last = 0;
    for (std::uint32_t tag2 = 0; !r.done();) {
      std::uint64_t entries = 0;
      if (!r.get(tag2) || !r.get(entries) || tag2 == last) return bad();
      last = tag2;
      if (tag2 == kRefusalsTag) {
        if (entries > body.size()) return bad();
        program.refusals.resize(entries);
        for (auto& text : program.refusals)
          if (!r.getText(text)) return bad();
        continue;
      }
      if ((tag2 != kWindow2Tag && tag2 != kTypesTag) || entries > program.operands.size()) return bad();
      for (std::uint64_t p = 0; p < entries; ++p) {
        std::uint64_t k = 0;
        std::int32_t value = 0;
        if (!r.get(k) || !r.get(value) || k >= program.operands.size() || value <= (tag2 == kTypesTag ? 0 : -1))
          return bad();
        if (tag2 == kWindow2Tag) program.operands[k].window2 = value;
        else program.operands[k].types = static_cast<std::uint32_t>(value);
      }
    }
    for (const auto& i : program.instructions)
      if (i.operand >= static_cast<std::int32_t>(program.operands.size())) return bad();
    for (const auto& o : program.operands)
      if (o.accumulator >= static_cast<std::int32_t>(program.accumulators.size()) ||
          o.window >= static_cast<std::int32_t>(program.windows.size()) ||
          o.window2 >= static_cast<std::int32_t>(program.windows.size()) ||
          o.map >= static_cast<std::int32_t>(program.maps.size()))
        return bad();
  }
  if (!r.done() || (tag != 0 && tag != kFunctionalTag)) return fail("malformed program: trailing bytes");
  return program;
}

std::string toText(const Program& program, const topology::ChipSpec& chip) {
  if (!program.pieces.empty()) return toText(expanded(program), chip);
  const auto units = chip.units();
  std::string out = fmt::format(
      "# tsp-program v{} chip-spec {:016x}\n# predicted_cycles {} lower_bound_cycles {} sram_bytes {} "
      "instructions {}\n",
      program.version, program.chipSpecHash, program.predictedCycles, program.lowerBoundCycles, program.sramBytes,
      program.instructions.size());
  for (const auto& t : program.tensors) {
    out += fmt::format("# tensor {} rows {} tiles {}{}{}{}:", t.name, t.rows, t.tiles,
                       t.segmentRows > 0 ? fmt::format(" segment_rows {}", t.segmentRows) : "",
                       t.replicas > 1 ? fmt::format(" replicas {}", t.replicas) : "",
                       t.resident ? " resident" : "");
    for (size_t k = 0; k < t.memUnit.size(); ++k) out += fmt::format(" {}@{}", t.memUnit[k], t.address[k]);
    out += "\n";
  }
  auto ref = [](const char* name, StreamRef r) {
    return r.valid() ? fmt::format(" {}={}{}", name, r.dir == Direction::kEast ? 'E' : 'W', r.id) : std::string();
  };
  for (const auto& i : program.instructions) {
    const bool known = i.unit >= 0 && i.unit < static_cast<int>(units.size());
    out += fmt::format("{:>10} q{:<3} {}{:<2} s{:<3} {}", i.issue, i.unit,
                       known ? topology::unitKindName(units[i.unit].kind) : "?",
                       known ? units[i.unit].indexInKind : -1, known ? units[i.unit].slice : -1, opcodeName(i.op));
    if (i.func != VxmFunc::kNone) out += fmt::format(".{}", vxmFuncName(i.func));
    out += ref("src", i.src) + ref("src2", i.src2) + ref("dst", i.dst);
    if (i.address >= 0) out += fmt::format(" addr={} bank={} stride={}", i.address, i.bank, i.stride);
    if (i.port >= 0) out += fmt::format(" port={}", i.port);
    if (i.op == Opcode::kC2cSend && i.stride != 0) out += fmt::format(" stream_from={}", i.stride);
    if (i.weightUnit >= 0) out += fmt::format(" weights=q{}x{}", i.weightUnit, i.weightRows);
    if (i.sxm == SxmFunc::kCopy) out += " copy";
    if (i.sxm == SxmFunc::kWindow) out += " window";
    if (i.sxm == SxmFunc::kLanes) out += " lanes";
    if (i.sxm == SxmFunc::kPermute) out += " permute";
    if (i.timingOnly) out += " timing-only";
    if (i.operand >= 0) out += fmt::format(" operand={}", i.operand);
    if (i.repeat != 1 || i.interval != 1) out += fmt::format(" repeat={},{}", i.repeat, i.interval);
    out += "\n";
  }
  return out;
}

}  // namespace tsp::isa
