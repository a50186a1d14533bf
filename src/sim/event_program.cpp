// A program as the chip's event loop reads it: decoded once per (program, chip spec) and shared by every chip running it.
#include "sim/event_program.h"

#include <algorithm>
#include <limits>
#include <map>
#include <mutex>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <unordered_map>

#include <fmt/format.h>

namespace tsp::sim {

using isa::Instruction;
using isa::Opcode;

std::optional<std::string> malformation(const Instruction& inst, const topology::ChipSpec& spec,
                                        const std::vector<topology::UnitInfo>& units) {
  if (inst.repeat < 1 || inst.interval < 1) return "repeat and interval must be >= 1";
  if (inst.op != Opcode::kNop && isa::unitKindOf(inst.op) != units[inst.unit].kind)
    return "opcode cannot run on this kind of unit";
  for (const isa::StreamRef* ref : {&inst.src, &inst.src2, &inst.dst})
    if (ref->valid() && ref->id >= spec.streamsPerDirection)
      return fmt::format("stream {} does not exist (the chip has {} per direction)", ref->id, spec.streamsPerDirection);
  return std::nullopt;
}

namespace {

// What the chip spec says of each opcode, looked up once per program rather than per instruction.
struct SpecTable {
  Cycle resultLatency[static_cast<int>(Opcode::kCount)];
  Cycle busyPerIssue[static_cast<int>(Opcode::kCount)];
  topology::UnitKind kind[static_cast<int>(Opcode::kCount)];

  explicit SpecTable(const topology::ChipSpec& spec) {
    for (int op = 0; op < static_cast<int>(Opcode::kCount); ++op) {
      Instruction probe;
      probe.op = static_cast<Opcode>(op);
      resultLatency[op] = isa::resultLatency(spec, probe);
      busyPerIssue[op] = isa::busyPerIssue(spec, probe);
      kind[op] = isa::unitKindOf(probe.op);
    }
  }
};

// What decoding reads of the spec, loaded once per list of instructions.
struct Decoder {
  const topology::ChipSpec& spec;
  const SpecTable& table;
  const topology::UnitInfo* units;
  std::uint32_t unitCount;
  int streams;
  int addressesPerSlice;
  const std::uint8_t* banks;  // ChipSpec::bankOf of each address of a slice, or null (then asked of the spec)

  Decoder(const topology::ChipSpec& spec, const SpecTable& table, const std::vector<topology::UnitInfo>& units,
          const std::vector<std::uint8_t>& banks)
      : spec(spec), table(table), units(units.data()), unitCount(static_cast<std::uint32_t>(units.size())),
        streams(spec.streamsPerDirection), addressesPerSlice(spec.addressesPerSlice),
        banks(banks.empty() ? nullptr : banks.data()) {}

  // Adds to `e`, made from `inst`, what the spec derives (the fields a malformed instruction leaves keep
  // their defaults).
  void derive(const Instruction& inst, Event& e) const {
    if (static_cast<std::uint32_t>(inst.unit) >= unitCount || inst.op >= Opcode::kCount) {
      e.checks = kMalformed;
      return;
    }
    const topology::UnitInfo& unit = units[inst.unit];
    e.slice = static_cast<std::int16_t>(unit.slice);
    e.indexInKind = static_cast<std::int16_t>(unit.indexInKind);
    e.kind = unit.kind;
    const int op = static_cast<int>(inst.op);
    // The checks of malformation(), which names the first that fails.
    if (inst.repeat < 1 || inst.interval < 1 || (inst.op != Opcode::kNop && table.kind[op] != unit.kind) ||
        inst.src.id >= streams || inst.src2.id >= streams || inst.dst.id >= streams) {
      e.checks = kMalformed;
      return;
    }
    e.span = Cycle{inst.repeat - 1} * inst.interval;
    e.busyPerIssue = inst.op == Opcode::kNop ? isa::busyPerIssue(spec, inst) : table.busyPerIssue[op];
    e.busy = e.busyPerIssue * inst.repeat;
    e.resultLatency = table.resultLatency[op];
    if ((inst.op == Opcode::kMemRead || inst.op == Opcode::kMemWrite) && inst.bank >= 0 && inst.address >= 0 &&
        inst.address < addressesPerSlice &&
        inst.bank != (banks ? banks[inst.address] : spec.bankOf(inst.address)))
      e.checks = kBankField;
  }
};

}  // namespace

// What the spec says of its units, opcodes and addresses, shared by every program decoded for an equal spec.
struct EventProgram::SpecTables {
  std::vector<topology::UnitInfo> units;
  SpecTable opcodes;
  std::vector<std::uint8_t> banks;  // the bank of each address of a slice (empty: more than 256 banks)

  explicit SpecTables(const topology::ChipSpec& spec) : units(spec.units()), opcodes(spec) {
    if (spec.banksPerSlice > 256) return;
    banks.resize(static_cast<size_t>(std::max(0, spec.addressesPerSlice)));
    for (size_t a = 0; a < banks.size(); ++a) banks[a] = static_cast<std::uint8_t>(spec.bankOf(static_cast<int>(a)));
  }
  static std::shared_ptr<const SpecTables> of(const topology::ChipSpec& spec) {
    static std::mutex mutex;
    static std::map<std::string, std::weak_ptr<const SpecTables>> cache;  // by the spec's canonical form
    std::lock_guard lock(mutex);
    auto& held = cache[spec.canonical()];
    auto tables = held.lock();
    if (!tables) held = tables = std::make_shared<const SpecTables>(spec);
    return tables;
  }
};

namespace {

// A cache of values made from objects that may die: key -> (weak owner, value), the value held while
// its owner lives (kHoldValue) or only while someone else holds it. Entries whose owner or value died
// are dropped by a sweep once the cache has doubled since the last one: amortised O(1) per insert (a
// sweep at every insert made decoding 10,440 programs quadratic), at most as many dead entries as live
// ones plus 32.
template <typename Owner, typename Value, bool kHoldValue>
class WeakCache {
 public:
  using Key = std::pair<const void*, const void*>;
  // The live value at `key`, or null. An unexpired weak pointer at this address is the same object
  // (another one would have a new control block).
  std::shared_ptr<Value> find(const Key& key) const {
    auto it = map_.find(key);
    if (it == map_.end() || it->second.owner.expired()) return nullptr;
    return valueOf(it->second.value);
  }
  void insert(const Key& key, const std::shared_ptr<Owner>& owner, const std::shared_ptr<Value>& value) {
    if (map_.size() >= 2 * std::max<size_t>(16, sweptSize_)) {
      std::erase_if(map_, [](const auto& entry) {
        return entry.second.owner.expired() || expiredValue(entry.second.value);
      });
      sweptSize_ = map_.size();
    }
    map_[key] = {owner, holder(value)};
  }

 private:
  struct KeyHash {
    size_t operator()(const Key& k) const {
      return std::hash<const void*>()(k.first) * 31 + std::hash<const void*>()(k.second);
    }
  };
  static constexpr bool kWeakValue = !kHoldValue;
  using Held = std::conditional_t<kWeakValue, std::weak_ptr<Value>, std::shared_ptr<Value>>;
  static Held holder(const std::shared_ptr<Value>& v) { return v; }
  static std::shared_ptr<Value> valueOf(const Held& h) {
    if constexpr (kWeakValue) return h.lock();
    else return h;
  }
  static bool expiredValue(const Held& h) {
    if constexpr (kWeakValue) return h.expired();
    else return false;
  }
  struct Entry {
    std::weak_ptr<Owner> owner;
    Held value;
  };
  std::unordered_map<Key, Entry, KeyHash> map_;
  size_t sweptSize_ = 0;
};

}  // namespace

std::shared_ptr<EventProgram::Body> EventProgram::decodeBody(const Instruction* list, size_t count) const {
  const Decoder decoder(*spec_, tables_->opcodes, tables_->units, tables_->banks);
  auto body = std::make_shared<Body>();
  body->events.reserve(count);
  for (size_t i = 0; i < count; ++i) {
    decoder.derive(list[i], body->events.emplace_back(list[i]));
    const Opcode op = list[i].op;
    if (op == Opcode::kC2cSend || op == Opcode::kC2cReceive || op == Opcode::kC2cForward)
      body->c2c.push_back(static_cast<std::uint32_t>(i));
  }
  return body;
}

std::shared_ptr<const EventProgram::Body> EventProgram::bodyOf(const std::shared_ptr<const isa::InstructionBody>& body,
                                                               size_t start, size_t count) const {
  static std::mutex mutex;
  static WeakCache<const isa::InstructionBody, const Body, false> cache;  // while a cursor holds it
  const Instruction* first = body->instructions.data() + start;
  const std::pair<const void*, const void*> key{first, spec_};  // a chunk of a living body
  std::lock_guard lock(mutex);
  if (auto found = cache.find(key)) return found;
  std::shared_ptr<Body> made = decodeBody(first, count);
  if (!body->originOf.empty()) {
    made->origins.assign(count, -1);
    for (size_t i = start; i < std::min(start + count, body->originOf.size()); ++i)
      made->origins[i - start] = body->originOf[i];
  }
  cache.insert(key, body, made);
  return made;
}

EventProgram::EventProgram(const isa::Program& program, const topology::ChipSpec& spec)
    : program_(&program), spec_(&spec), tables_(SpecTables::of(spec)) {
  const isa::Program& p = program;
  originTensors_.reserve(p.origins.size());
  for (const auto& origin : p.origins)
    originTensors_.push_back(origin.tensor.empty() ? 0 : burstTensor(origin.tensor));
  if (std::any_of(p.origins.begin(), p.origins.end(), [](const isa::OpOrigin& o) { return !o.input.empty(); })) {
    // Dense ids of the tensor instances some origin reads, so that a chip keeps its data-flow state in
    // arrays. An instance is (name, producer, microbatch): an origin reads (input, inputProducer,
    // instance) and writes (tensor, op, instance), its op being the one that made its tensor (a moved
    // tensor's producer, lower::movedOrigin). An op's output and a neighbour's copy received under its
    // name thus differ, and so do the microbatches' copies.
    // The names stay in the program while the map lives, so the keys view them.
    using Instance = std::tuple<std::string_view, std::string_view, std::int32_t>;
    struct InstanceHash {
      size_t operator()(const Instance& k) const {
        const std::hash<std::string_view> text;
        size_t h = text(std::get<0>(k));
        h ^= text(std::get<1>(k)) + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
        return h ^ (std::hash<std::int32_t>{}(std::get<2>(k)) + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2));
      }
    };
    const auto key = [](const std::string& name, const std::string& producer, std::int32_t instance) {
      return Instance{name, producer, instance};
    };
    std::unordered_map<Instance, std::int32_t, InstanceHash> ids;
    ids.reserve(p.origins.size());
    originReads_.reserve(p.origins.size());
    for (const auto& origin : p.origins)
      originReads_.push_back(origin.input.empty()
                                 ? -1
                                 : ids.try_emplace(key(origin.input, origin.inputProducer, origin.instance),
                                                   static_cast<std::int32_t>(ids.size()))
                                       .first->second);
    originWrites_.reserve(p.origins.size());
    for (const auto& origin : p.origins) {
      const auto it = ids.find(key(origin.tensor, origin.op, origin.instance));
      originWrites_.push_back(it == ids.end() ? -1 : it->second);
    }
    readTensors_ = ids.size();
  }
  Cycle lastIssue = std::numeric_limits<Cycle>::min();
  std::int32_t lastUnit = std::numeric_limits<std::int32_t>::min();
  const auto order = [&](const std::vector<Instruction>& list, Cycle offset) {
    for (size_t i = 0; i < list.size() && canonical_; ++i) {
      const Cycle issue = list[i].issue + offset;
      const std::int32_t unit = list[i].unit;
      canonical_ = issue != lastIssue ? issue > lastIssue : unit >= lastUnit;
      lastIssue = issue;
      lastUnit = unit;
    }
  };
  if (p.pieces.empty()) {
    whole_ = decodeBody(p.instructions.data(), p.instructions.size());
    segments_.push_back({whole_.get(), nullptr, 0, whole_->events.size(), 0, 0});
    size_ = whole_->events.size();
    order(p.instructions, 0);
    return;
  }
  segments_.reserve(p.pieces.size());
  for (const auto& piece : p.pieces) {
    const size_t count = piece.body->instructions.size();
    for (size_t start = 0; start < count; start += kChunkEvents)
      segments_.push_back({nullptr, &piece, start, std::min(kChunkEvents, count - start), piece.offset, size_ + start,
                           piece.originMap.get()});
    size_ += count;
    order(piece.body->instructions, piece.offset);
  }
}

EventProgram::~EventProgram() = default;

const std::vector<std::uint8_t>& EventProgram::banks() const { return tables_->banks; }
const std::vector<topology::UnitInfo>& EventProgram::units() const { return tables_->units; }

void EventProgram::enter(Cursor& c) const {
  if (c.segment >= segments_.size()) {
    c = Cursor{};
    c.segment = segments_.size();
    return;
  }
  const Segment& s = segments_[c.segment];
  c.count = s.count;
  c.offset = s.offset;
  if (s.decoded) {
    c.hold.reset();
    c.events = s.decoded->events.data();
    c.c2c = &s.decoded->c2c;
    return;
  }
  c.hold = bodyOf(s.piece->body, s.start, s.count);
  c.events = c.hold->events.data();
  c.c2c = &c.hold->c2c;
  c.origins = c.hold->origins.empty() ? nullptr : c.hold->origins.data();
}

EventProgram::Cursor EventProgram::begin() const {
  Cursor c;
  while (c.segment < segments_.size() && segments_[c.segment].count == 0) ++c.segment;
  enter(c);
  return c;
}

const EventProgram::Segment& EventProgram::segmentOf(size_t index, size_t& hint) const {
  const auto holds = [&](size_t k) {
    return k < segments_.size() && index >= segments_[k].first && index - segments_[k].first < segments_[k].count;
  };
  if (holds(hint)) return segments_[hint];
  if (holds(hint + 1)) return segments_[++hint];
  auto it = std::upper_bound(segments_.begin(), segments_.end(), index,
                             [](size_t i, const Segment& s) { return i < s.first; });
  hint = static_cast<size_t>(it - segments_.begin()) - 1;
  return segments_[hint];
}

Instruction EventProgram::instruction(size_t index, size_t& hint) const {
  const Segment& s = segmentOf(index, hint);
  if (!s.piece) return program_->instructions[index];
  Instruction inst = s.piece->body->instructions[s.start + index - s.first];
  inst.issue += s.offset;
  return inst;
}

std::int32_t EventProgram::originOf(size_t index, size_t& hint) const {
  const Segment& s = segmentOf(index, hint);
  if (!s.piece) return index < program_->originOf.size() ? program_->originOf[index] : -1;
  const isa::ProgramPiece& piece = *s.piece;
  const size_t k = s.start + index - s.first;
  if (!piece.originMap || k >= piece.body->originOf.size()) return -1;
  const std::int32_t local = piece.body->originOf[k];
  return local >= 0 && static_cast<size_t>(local) < piece.originMap->size() ? (*piece.originMap)[local] : -1;
}

Event EventProgram::at(size_t index) const {
  size_t hint = 0;
  const Segment& s = segmentOf(index, hint);
  const size_t at = index - s.first;
  Event e;
  if (s.decoded) {
    e = s.decoded->events[at];
  } else {
    const Instruction& inst = s.piece->body->instructions[s.start + at];
    e = Event(inst);
    Decoder(*spec_, tables_->opcodes, tables_->units, tables_->banks).derive(inst, e);
  }
  e.issue += s.offset;
  return e;
}

std::shared_ptr<SharedChecks> EventProgram::sharedChecks(int bins, Cycle binCycles) const {
  std::lock_guard lock(sharedMutex_);
  for (const auto& s : shared_)
    if (s->bins == bins && s->binCycles == binCycles) return s;
  auto made = std::make_shared<SharedChecks>();
  made->bins = bins;
  made->binCycles = binCycles;
  shared_.push_back(made);
  return made;
}

std::shared_ptr<const EventProgram> EventProgram::of(const std::shared_ptr<const isa::Program>& program,
                                                     const topology::ChipSpec& spec) {
  // Kept while the program lives: a program is decoded once however many chips run it, one after
  // another or at once.
  static std::mutex mutex;
  static WeakCache<const isa::Program, const EventProgram, true> cache;
  const std::pair<const void*, const void*> key{program.get(), &spec};
  std::lock_guard lock(mutex);
  if (auto found = cache.find(key)) return found;
  auto made = std::make_shared<const EventProgram>(*program, spec);
  cache.insert(key, program, made);
  return made;
}

}  // namespace tsp::sim
