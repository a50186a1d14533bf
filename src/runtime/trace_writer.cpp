// The HDF5 trace writer: parallel HDF5, chunked and compressed datasets, collective writes.
#include "runtime/trace_writer.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>

#include <fcntl.h>
#include <unistd.h>

#include <fmt/format.h>
#include <hdf5.h>

namespace tsp::runtime {

namespace {

// Space kept free beside the temporary trace while it is written and released just before it is
// closed: HDF5 writes most of its metadata when the file closes, and a write that fails there on
// one rank leaves the others waiting inside HDF5's collective close. Failures of the data writes
// before it are reported on the failing rank and end the job (exit 5).
constexpr off_t kReservedBytes = off_t{16} << 20;

std::string reservePath(const std::string& temp) { return temp + ".reserve"; }

// Creates the reserve file; false when the disk has not that much room.
bool reserveSpace(const std::string& temp) {
  const int fd = ::open(reservePath(temp).c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  if (fd < 0) return false;
  const bool ok = ::posix_fallocate(fd, 0, kReservedBytes) == 0;
  ::close(fd);
  if (!ok) std::remove(reservePath(temp).c_str());
  return ok;
}

// Closes an HDF5 handle at scope exit.
class Handle {
 public:
  Handle(hid_t id, herr_t (*close)(hid_t)) : id_(id), close_(close) {}
  ~Handle() {
    if (id_ >= 0) close_(id_);
  }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  operator hid_t() const { return id_; }  // NOLINT: used as the id it wraps
  bool ok() const { return id_ >= 0; }

 private:
  hid_t id_;
  herr_t (*close_)(hid_t);
};

Diagnostic ioError(const std::string& what) { return makeError(ExitCode::kInternal, "HDF5: " + what); }

hid_t ensureGroup(hid_t file, const char* path) {
  if (H5Lexists(file, path, H5P_DEFAULT) > 0) return H5Gopen2(file, path, H5P_DEFAULT);
  return H5Gcreate2(file, path, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
}

Status stringAttribute(hid_t object, const char* name, const std::string& value) {
  Handle type(H5Tcopy(H5T_C_S1), H5Tclose);
  H5Tset_size(type, H5T_VARIABLE);
  H5Tset_cset(type, H5T_CSET_UTF8);
  Handle space(H5Screate(H5S_SCALAR), H5Sclose);
  Handle attr(H5Acreate2(object, name, type, space, H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
  const char* data = value.c_str();
  if (!attr.ok() || H5Awrite(attr, type, &data) < 0) return ioError(fmt::format("cannot write attribute {}", name));
  return {};
}

template <typename T>
Status numberAttribute(hid_t object, const char* name, hid_t type, T value) {
  Handle space(H5Screate(H5S_SCALAR), H5Sclose);
  Handle attr(H5Acreate2(object, name, type, space, H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
  if (!attr.ok() || H5Awrite(attr, type, &value) < 0) return ioError(fmt::format("cannot write attribute {}", name));
  return {};
}

// Creates dataset `path` of shape dims and writes the rows (along dim 0) listed in `rows` from
// `data` (rows in the order listed), collectively. Rows are grouped into contiguous runs.
Status writeRows(hid_t file, const char* path, hid_t type, const std::vector<hsize_t>& dims,
                 const std::vector<int>& rows, const void* data) {
  const int rank = static_cast<int>(dims.size());
  Handle fileSpace(H5Screate_simple(rank, dims.data(), nullptr), H5Sclose);
  Handle create(H5Pcreate(H5P_DATASET_CREATE), H5Pclose);
  std::vector<hsize_t> chunk = dims;
  hsize_t rowElements = 1;
  for (int d = 1; d < rank; ++d) rowElements *= dims[d];
  chunk[0] = std::max<hsize_t>(1, std::min<hsize_t>(dims[0], std::max<hsize_t>(1, 65536 / std::max<hsize_t>(1, rowElements))));
  for (int d = 1; d < rank; ++d) chunk[d] = std::max<hsize_t>(1, dims[d]);
  H5Pset_chunk(create, rank, chunk.data());
  H5Pset_deflate(create, 4);
  Handle dataset(H5Dcreate2(file, path, type, fileSpace, H5P_DEFAULT, create, H5P_DEFAULT), H5Dclose);
  if (!dataset.ok()) return ioError(fmt::format("cannot create {}", path));

  std::vector<hsize_t> memDims = dims;
  memDims[0] = rows.size();
  Handle memSpace(H5Screate_simple(rank, memDims.data(), nullptr), H5Sclose);
  if (rows.empty()) {
    H5Sselect_none(fileSpace);
    H5Sselect_none(memSpace);
  } else {
    H5Sselect_none(fileSpace);
    size_t i = 0;
    while (i < rows.size()) {
      size_t j = i + 1;
      while (j < rows.size() && rows[j] == rows[j - 1] + 1) ++j;
      std::vector<hsize_t> start(rank, 0), count = dims;
      start[0] = static_cast<hsize_t>(rows[i]);
      count[0] = j - i;
      H5Sselect_hyperslab(fileSpace, H5S_SELECT_OR, start.data(), nullptr, count.data(), nullptr);
      i = j;
    }
  }
  Handle transfer(H5Pcreate(H5P_DATASET_XFER), H5Pclose);
  H5Pset_dxpl_mpio(transfer, H5FD_MPIO_COLLECTIVE);
  if (H5Dwrite(dataset, type, memSpace, fileSpace, transfer, data) < 0)
    return ioError(fmt::format("cannot write {}", path));
  return {};
}

// A NUL-padded string type of n bytes (the compound tables' names: parallel HDF5 writes no variable-length data).
hid_t fixedString(size_t n) {
  hid_t t = H5Tcopy(H5T_C_S1);
  H5Tset_size(t, n);
  return t;
}

// The busy_<kind> columns of a row type that has busyMem ... busyC2c.
template <typename Row>
void insertBusyFields(hid_t t) {
  H5Tinsert(t, "busy_mem", HOFFSET(Row, busyMem), H5T_NATIVE_INT64);
  H5Tinsert(t, "busy_vxm", HOFFSET(Row, busyVxm), H5T_NATIVE_INT64);
  H5Tinsert(t, "busy_mxm", HOFFSET(Row, busyMxm), H5T_NATIVE_INT64);
  H5Tinsert(t, "busy_sxm", HOFFSET(Row, busySxm), H5T_NATIVE_INT64);
  H5Tinsert(t, "busy_c2c", HOFFSET(Row, busyC2c), H5T_NATIVE_INT64);
}

hid_t chipRowType() {
  hid_t t = H5Tcreate(H5T_COMPOUND, sizeof(ChipRow));
  H5Tinsert(t, "chip", HOFFSET(ChipRow, chip), H5T_NATIVE_INT32);
#define TSP_FIELD(name, member) H5Tinsert(t, name, HOFFSET(ChipRow, member), H5T_NATIVE_INT64)
  TSP_FIELD("cycles", cycles);
  TSP_FIELD("predicted_cycles", predictedCycles);
  TSP_FIELD("lower_bound_cycles", lowerBoundCycles);
  TSP_FIELD("instructions", instructions);
  insertBusyFields<ChipRow>(t);
  TSP_FIELD("bytes_sent", bytesSent);
  TSP_FIELD("bytes_received", bytesReceived);
  TSP_FIELD("sram_peak_bytes", sramPeakBytes);
  TSP_FIELD("compute_cycles", computeCycles);
  TSP_FIELD("comm_cycles", commCycles);
  TSP_FIELD("bubble_cycles", bubbleCycles);
  TSP_FIELD("other_cycles", otherCycles);
#undef TSP_FIELD
  return t;
}

hid_t c2cEventType() {
  hid_t t = H5Tcreate(H5T_COMPOUND, sizeof(C2cEventRow));
  H5Tinsert(t, "src_chip", HOFFSET(C2cEventRow, srcChip), H5T_NATIVE_INT32);
  H5Tinsert(t, "dst_chip", HOFFSET(C2cEventRow, dstChip), H5T_NATIVE_INT32);
  H5Tinsert(t, "link", HOFFSET(C2cEventRow, link), H5T_NATIVE_INT32);
  H5Tinsert(t, "send_cycle", HOFFSET(C2cEventRow, sendCycle), H5T_NATIVE_INT64);
  H5Tinsert(t, "arrive_cycle", HOFFSET(C2cEventRow, arriveCycle), H5T_NATIVE_INT64);
  H5Tinsert(t, "bytes", HOFFSET(C2cEventRow, bytes), H5T_NATIVE_INT64);
  H5Tinsert(t, "vectors", HOFFSET(C2cEventRow, vectors), H5T_NATIVE_INT32);
  H5Tinsert(t, "interval", HOFFSET(C2cEventRow, interval), H5T_NATIVE_INT32);
  H5Tinsert(t, "op", HOFFSET(C2cEventRow, op), H5T_NATIVE_INT32);
  return t;
}

hid_t instructionEventType() {
  hid_t t = H5Tcreate(H5T_COMPOUND, sizeof(InstructionEventRow));
  H5Tinsert(t, "chip", HOFFSET(InstructionEventRow, chip), H5T_NATIVE_INT32);
  H5Tinsert(t, "unit", HOFFSET(InstructionEventRow, unit), H5T_NATIVE_INT32);
  H5Tinsert(t, "slice", HOFFSET(InstructionEventRow, slice), H5T_NATIVE_INT32);
  H5Tinsert(t, "opcode", HOFFSET(InstructionEventRow, opcode), H5T_NATIVE_INT16);
  H5Tinsert(t, "program_index", HOFFSET(InstructionEventRow, programIndex), H5T_NATIVE_INT64);
  H5Tinsert(t, "start_cycle", HOFFSET(InstructionEventRow, startCycle), H5T_NATIVE_INT64);
  H5Tinsert(t, "end_cycle", HOFFSET(InstructionEventRow, endCycle), H5T_NATIVE_INT64);
  H5Tinsert(t, "repeat", HOFFSET(InstructionEventRow, repeat), H5T_NATIVE_INT32);
  H5Tinsert(t, "op", HOFFSET(InstructionEventRow, op), H5T_NATIVE_INT32);
  return t;
}

// Rows of an event table stream in during the run, so the table is extendible and its chunks are
// sized for streaming; rows never written (a partial trace) read as the fill value, all -1.
template <typename Row>
Status createEventTable(hid_t file, const char* path, hid_t type, std::int64_t rows) {
  const hsize_t dims[1] = {static_cast<hsize_t>(rows)}, maxDims[1] = {H5S_UNLIMITED};
  Handle space(H5Screate_simple(1, dims, maxDims), H5Sclose);
  Handle create(H5Pcreate(H5P_DATASET_CREATE), H5Pclose);
  const hsize_t chunk[1] = {std::clamp<hsize_t>(static_cast<hsize_t>(rows), 1, 16384)};
  H5Pset_chunk(create, 1, chunk);
  H5Pset_deflate(create, 4);
  Row fill;
  std::memset(&fill, 0xff, sizeof fill);
  H5Pset_fill_value(create, type, &fill);
  Handle dataset(H5Dcreate2(file, path, type, space, H5P_DEFAULT, create, H5P_DEFAULT), H5Dclose);
  if (!dataset.ok()) return ioError(fmt::format("cannot create {}", path));
  return {};
}

// Writes rows at ascending positions of a 1-D table, collectively (a rank may have none).
template <typename Row>
Status writeEventRows(hid_t file, const char* path, hid_t type, const EventRows<Row>& rows) {
  Handle dataset(H5Dopen2(file, path, H5P_DEFAULT), H5Dclose);
  if (!dataset.ok()) return ioError(fmt::format("cannot open {}", path));
  Handle fileSpace(H5Dget_space(dataset), H5Sclose);
  H5Sselect_none(fileSpace);
  const hsize_t memDims[1] = {std::max<hsize_t>(1, rows.rows.size())};
  Handle memSpace(H5Screate_simple(1, memDims, nullptr), H5Sclose);
  if (rows.rows.empty()) {
    H5Sselect_none(memSpace);
  } else {
    for (size_t i = 0; i < rows.positions.size();) {
      size_t j = i + 1;
      while (j < rows.positions.size() && rows.positions[j] == rows.positions[j - 1] + 1) ++j;
      const hsize_t start[1] = {static_cast<hsize_t>(rows.positions[i])}, count[1] = {j - i};
      H5Sselect_hyperslab(fileSpace, H5S_SELECT_OR, start, nullptr, count, nullptr);
      i = j;
    }
  }
  Handle transfer(H5Pcreate(H5P_DATASET_XFER), H5Pclose);
  H5Pset_dxpl_mpio(transfer, H5FD_MPIO_COLLECTIVE);
  if (H5Dwrite(dataset, type, memSpace, fileSpace, transfer, rows.rows.data()) < 0)
    return ioError(fmt::format("cannot write {}", path));
  return {};
}

std::vector<int> rowsOfRank0(int rank, size_t count) {
  std::vector<int> rows;
  if (rank == 0)
    for (size_t i = 0; i < count; ++i) rows.push_back(static_cast<int>(i));
  return rows;
}

}  // namespace

TraceWriter::TraceWriter(std::string tempPath, MPI_Comm comm, std::int64_t file)
    : tempPath_(std::move(tempPath)), comm_(comm), file_(file) {
  MPI_Comm_rank(comm_, &rank_);
}

TraceWriter::TraceWriter(TraceWriter&& other) noexcept
    : tempPath_(std::move(other.tempPath_)), comm_(other.comm_), file_(other.file_), rank_(other.rank_) {
  other.file_ = -1;
}

TraceWriter::~TraceWriter() {
  if (file_ >= 0) discard();
}

Status checkTraceTarget(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const SourceLocation where{path, 0, 0, ""};
  if (fs::is_directory(path, ec)) return configError(where, "cannot write the trace: the path is a directory");
  const fs::path parent = fs::path(path).parent_path().empty() ? fs::path(".") : fs::path(path).parent_path();
  if (!fs::exists(parent, ec)) {
    // The trace's directory is made when missing (output.trace: out/run.h5 in a fresh checkout).
    if (!fs::create_directories(parent, ec) && !fs::is_directory(parent))
      return configError(where, fmt::format("cannot write the trace: cannot create the directory {}", parent.string()));
  }
  if (!fs::is_directory(parent, ec))
    return configError(where, fmt::format("cannot write the trace: {} is not a directory", parent.string()));
  if (::access(parent.c_str(), W_OK | X_OK) != 0)
    return configError(where, fmt::format("cannot write the trace: the directory {} is not writable", parent.string()));
  return {};
}

Expected<TraceWriter> TraceWriter::create(const std::string& finalPath, MPI_Comm comm) {
  // A name no other run writing the same trace uses: rank 0's process id and a random tag.
  std::uint64_t tag = 0;
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  if (rank == 0) tag = (static_cast<std::uint64_t>(::getpid()) << 32) ^ std::random_device{}();
  MPI_Bcast(&tag, 1, MPI_UINT64_T, 0, comm);
  const std::string temp = fmt::format("{}.{:x}.tmp", finalPath, tag);
  int reserved = rank == 0 ? reserveSpace(temp) : 0;
  MPI_Bcast(&reserved, 1, MPI_INT, 0, comm);
  if (!reserved)
    return makeError(ExitCode::kInternal, fmt::format("{}: no room for the trace: cannot keep {} MiB free beside it",
                                                      finalPath, kReservedBytes >> 20));
  Handle access(H5Pcreate(H5P_FILE_ACCESS), H5Pclose);
  H5Pset_fapl_mpio(access, comm, MPI_INFO_NULL);
  hid_t file = H5Fcreate(temp.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, access);
  int okLocal = file >= 0, okAll = 0;
  MPI_Allreduce(&okLocal, &okAll, 1, MPI_INT, MPI_MIN, comm);
  if (!okAll) {
    if (file >= 0) H5Fclose(file);
    if (rank == 0) std::remove(reservePath(temp).c_str());
    return makeError(ExitCode::kConfig, fmt::format("{}: cannot create the trace file (does the directory exist?)", temp));
  }
  return TraceWriter(temp, comm, file);
}

Status TraceWriter::writeMeta(const TraceMeta& meta) {
  Handle group(ensureGroup(file_, "/meta"), H5Gclose);
  Status s;
  if (!(s = numberAttribute(group, "format_version", H5T_NATIVE_INT, kTraceFormatVersion))) return s;
  for (auto [name, value] : {std::pair{"tool_version", &meta.toolVersion}, std::pair{"config_yaml", &meta.configYaml},
                             std::pair{"plan_yaml", &meta.planYaml}, std::pair{"trace_level", &meta.traceLevel},
                             std::pair{"rank_mapping", &meta.rankMapping}, std::pair{"created", &meta.created}})
    if (!(s = stringAttribute(group, name, *value))) return s;
  if (!(s = numberAttribute(group, "clock_mhz", H5T_NATIVE_DOUBLE, meta.clockMhz))) return s;
  if (!(s = numberAttribute(group, "wall_seconds", H5T_NATIVE_DOUBLE, meta.wallSeconds))) return s;
  if (!(s = numberAttribute(group, "chip_count", H5T_NATIVE_INT64, meta.chipCount))) return s;
  if (!(s = numberAttribute(group, "link_count", H5T_NATIVE_INT64, meta.linkCount))) return s;
  if (!(s = numberAttribute(group, "seed", H5T_NATIVE_INT64, meta.seed))) return s;
  if (!(s = numberAttribute(group, "partial", H5T_NATIVE_INT, meta.partial ? 1 : 0))) return s;
  if (meta.partial && !(s = numberAttribute(group, "reached_cycle", H5T_NATIVE_INT64, meta.reachedCycle))) return s;
  return numberAttribute(group, "ranks", H5T_NATIVE_INT, meta.ranks);
}

Status TraceWriter::writeChips(const std::vector<ChipRow>& localRows, std::int64_t chipCount) {
  Handle group(ensureGroup(file_, "/summary"), H5Gclose);
  Handle type(chipRowType(), H5Tclose);
  std::vector<int> rows;
  for (const auto& r : localRows) rows.push_back(r.chip);
  return writeRows(file_, "/summary/chips", type, {static_cast<hsize_t>(chipCount)}, rows, localRows.data());
}

Status TraceWriter::writeUnitBusy(const std::vector<int>& localChips, const std::vector<std::int64_t>& rows, int units,
                                  std::int64_t chipCount) {
  Handle group(ensureGroup(file_, "/summary"), H5Gclose);
  return writeRows(file_, "/summary/unit_busy_cycles", H5T_NATIVE_INT64,
                   {static_cast<hsize_t>(chipCount), static_cast<hsize_t>(units)}, localChips, rows.data());
}

Status TraceWriter::writeTimeline(const std::vector<int>& localChips, const std::vector<float>& rows, int kinds,
                                  int bins, std::int64_t binCycles, std::int64_t chipCount) {
  Handle group(ensureGroup(file_, "/timeline"), H5Gclose);
  if (auto s = writeRows(file_, "/timeline/utilization", H5T_NATIVE_FLOAT,
                         {static_cast<hsize_t>(chipCount), static_cast<hsize_t>(kinds), static_cast<hsize_t>(bins)},
                         localChips, rows.data());
      !s)
    return s;
  Handle dataset(H5Dopen2(file_, "/timeline/utilization", H5P_DEFAULT), H5Dclose);
  return numberAttribute(dataset, "bin_cycles", H5T_NATIVE_INT64, binCycles);
}

Status TraceWriter::writeUnits(const std::vector<UnitRow>& rows) {
  Handle group(ensureGroup(file_, "/summary"), H5Gclose);
  Handle type(H5Tcreate(H5T_COMPOUND, sizeof(UnitRow)), H5Tclose);
  Handle kind(H5Tcopy(H5T_C_S1), H5Tclose);
  H5Tset_size(kind, sizeof(UnitRow::kind));
  H5Tinsert(type, "unit", HOFFSET(UnitRow, unit), H5T_NATIVE_INT32);
  H5Tinsert(type, "kind", HOFFSET(UnitRow, kind), kind);
  H5Tinsert(type, "slice", HOFFSET(UnitRow, slice), H5T_NATIVE_INT32);
  return writeRows(file_, "/summary/units", type, {rows.size()}, rowsOfRank0(rank_, rows.size()), rows.data());
}

Status TraceWriter::writeLinks(const std::vector<LinkRow>& rows) {
  Handle group(ensureGroup(file_, "/summary"), H5Gclose);
  Handle type(H5Tcreate(H5T_COMPOUND, sizeof(LinkRow)), H5Tclose);
  H5Tinsert(type, "link", HOFFSET(LinkRow, link), H5T_NATIVE_INT32);
  H5Tinsert(type, "a", HOFFSET(LinkRow, a), H5T_NATIVE_INT32);
  H5Tinsert(type, "b", HOFFSET(LinkRow, b), H5T_NATIVE_INT32);
  H5Tinsert(type, "bytes_ab", HOFFSET(LinkRow, bytesAb), H5T_NATIVE_INT64);
  H5Tinsert(type, "bytes_ba", HOFFSET(LinkRow, bytesBa), H5T_NATIVE_INT64);
  H5Tinsert(type, "busy_cycles_ab", HOFFSET(LinkRow, busyCyclesAb), H5T_NATIVE_INT64);
  H5Tinsert(type, "busy_cycles_ba", HOFFSET(LinkRow, busyCyclesBa), H5T_NATIVE_INT64);
  H5Tinsert(type, "latency_cycles", HOFFSET(LinkRow, latencyCycles), H5T_NATIVE_INT64);
  H5Tinsert(type, "bytes_per_cycle", HOFFSET(LinkRow, bytesPerCycle), H5T_NATIVE_DOUBLE);
  return writeRows(file_, "/summary/links", type, {rows.size()}, rowsOfRank0(rank_, rows.size()), rows.data());
}

Status TraceWriter::writeRun(const RunRow& row) {
  Handle group(ensureGroup(file_, "/summary"), H5Gclose);
  Handle type(H5Tcreate(H5T_COMPOUND, sizeof(RunRow)), H5Tclose);
  H5Tinsert(type, "makespan_cycles", HOFFSET(RunRow, makespanCycles), H5T_NATIVE_INT64);
  H5Tinsert(type, "makespan_seconds", HOFFSET(RunRow, makespanSeconds), H5T_NATIVE_DOUBLE);
  H5Tinsert(type, "throughput_per_second", HOFFSET(RunRow, throughputPerSecond), H5T_NATIVE_DOUBLE);
  H5Tinsert(type, "samples", HOFFSET(RunRow, samples), H5T_NATIVE_INT64);
  H5Tinsert(type, "chips", HOFFSET(RunRow, chips), H5T_NATIVE_INT32);
  H5Tinsert(type, "iterations", HOFFSET(RunRow, iterations), H5T_NATIVE_INT32);
  return writeRows(file_, "/summary/run", type, {1}, rowsOfRank0(rank_, 1), &row);
}

Status TraceWriter::writeAttribution(const Attribution& attribution) {
  std::vector<OpNameRow> names;
  for (const auto& origin : attribution.names) {
    OpNameRow row{};
    std::snprintf(row.op, sizeof row.op, "%s", origin.op.c_str());
    std::snprintf(row.kind, sizeof row.kind, "%s", origin.kind.c_str());
    row.layer = origin.layer;
    std::snprintf(row.tensor, sizeof row.tensor, "%s", origin.tensor.c_str());
    names.push_back(row);
  }
  const auto workRows = [](const std::vector<WorkRow>& rows) {
    std::vector<WorkSummaryRow> out;
    for (const auto& r : rows)
      out.push_back({r.id, r.chips, r.instructions, r.busy[0], r.busy[1], r.busy[2], r.busy[3], r.busy[4], r.memBytes,
                     r.c2cBytes, r.sramBytes, r.firstCycle, r.lastCycle, r.cycles, r.chipCycles, r.linkBusy});
    return out;
  };
  const std::vector<WorkSummaryRow> ops = workRows(attribution.ops), layers = workRows(attribution.layers);
  {
    Handle group(ensureGroup(file_, "/names"), H5Gclose);
    Handle type(H5Tcreate(H5T_COMPOUND, sizeof(OpNameRow)), H5Tclose);
    Handle opType(fixedString(sizeof(OpNameRow::op)), H5Tclose), kindType(fixedString(sizeof(OpNameRow::kind)), H5Tclose);
    H5Tinsert(type, "op", HOFFSET(OpNameRow, op), opType);
    H5Tinsert(type, "kind", HOFFSET(OpNameRow, kind), kindType);
    H5Tinsert(type, "layer", HOFFSET(OpNameRow, layer), H5T_NATIVE_INT32);
    H5Tinsert(type, "tensor", HOFFSET(OpNameRow, tensor), opType);
    if (auto s = writeRows(file_, "/names/ops", type, {names.size()}, rowsOfRank0(rank_, names.size()), names.data()); !s)
      return s;
  }
  Handle group(ensureGroup(file_, "/summary"), H5Gclose);
  Handle type(H5Tcreate(H5T_COMPOUND, sizeof(WorkSummaryRow)), H5Tclose);
  H5Tinsert(type, "id", HOFFSET(WorkSummaryRow, id), H5T_NATIVE_INT32);
  H5Tinsert(type, "chips", HOFFSET(WorkSummaryRow, chips), H5T_NATIVE_INT32);
#define TSP_FIELD(name, member) H5Tinsert(type, name, HOFFSET(WorkSummaryRow, member), H5T_NATIVE_INT64)
  TSP_FIELD("instructions", instructions);
  insertBusyFields<WorkSummaryRow>(type);
  TSP_FIELD("mem_bytes", memBytes);
  TSP_FIELD("c2c_bytes", c2cBytes);
  TSP_FIELD("sram_bytes", sramBytes);
  TSP_FIELD("first_cycle", firstCycle);
  TSP_FIELD("last_cycle", lastCycle);
  TSP_FIELD("cycles", cycles);
  TSP_FIELD("chip_cycles", chipCycles);
#undef TSP_FIELD
  H5Tinsert(type, "link_busy", HOFFSET(WorkSummaryRow, linkBusy), H5T_NATIVE_DOUBLE);
  if (auto s = writeRows(file_, "/summary/ops", type, {ops.size()}, rowsOfRank0(rank_, ops.size()), ops.data()); !s)
    return s;
  return writeRows(file_, "/summary/layers", type, {layers.size()}, rowsOfRank0(rank_, layers.size()), layers.data());
}

Status TraceWriter::writeSearchPlans(const std::vector<SearchPlanRow>& rows) {
  Handle group(ensureGroup(file_, "/search"), H5Gclose);
  Handle type(H5Tcreate(H5T_COMPOUND, sizeof(SearchPlanRow)), H5Tclose);
  Handle planType(fixedString(sizeof(SearchPlanRow::plan)), H5Tclose),
      splitType(fixedString(sizeof(SearchPlanRow::split)), H5Tclose);
  H5Tinsert(type, "rank", HOFFSET(SearchPlanRow, rank), H5T_NATIVE_INT32);
  H5Tinsert(type, "plan", HOFFSET(SearchPlanRow, plan), planType);
  H5Tinsert(type, "split", HOFFSET(SearchPlanRow, split), splitType);
  H5Tinsert(type, "dp", HOFFSET(SearchPlanRow, dp), H5T_NATIVE_INT32);
  H5Tinsert(type, "tp", HOFFSET(SearchPlanRow, tp), H5T_NATIVE_INT32);
  H5Tinsert(type, "pp", HOFFSET(SearchPlanRow, pp), H5T_NATIVE_INT32);
  H5Tinsert(type, "microbatches", HOFFSET(SearchPlanRow, microbatches), H5T_NATIVE_INT32);
  H5Tinsert(type, "interleave", HOFFSET(SearchPlanRow, interleave), H5T_NATIVE_INT32);
  H5Tinsert(type, "chips", HOFFSET(SearchPlanRow, chips), H5T_NATIVE_INT32);
  H5Tinsert(type, "iteration_cycles", HOFFSET(SearchPlanRow, iterationCycles), H5T_NATIVE_DOUBLE);
  H5Tinsert(type, "throughput_per_second", HOFFSET(SearchPlanRow, throughputPerSecond), H5T_NATIVE_DOUBLE);
  H5Tinsert(type, "latency_seconds", HOFFSET(SearchPlanRow, latencySeconds), H5T_NATIVE_DOUBLE);
  H5Tinsert(type, "memory_bytes", HOFFSET(SearchPlanRow, memoryBytes), H5T_NATIVE_INT64);
  H5Tinsert(type, "bubble_fraction", HOFFSET(SearchPlanRow, bubbleFraction), H5T_NATIVE_DOUBLE);
  H5Tinsert(type, "comm_share", HOFFSET(SearchPlanRow, commShare), H5T_NATIVE_DOUBLE);
  H5Tinsert(type, "feasible", HOFFSET(SearchPlanRow, feasible), H5T_NATIVE_UINT8);
  H5Tinsert(type, "exact", HOFFSET(SearchPlanRow, exact), H5T_NATIVE_UINT8);
  return writeRows(file_, "/search/plans", type, {rows.size()}, rowsOfRank0(rank_, rows.size()), rows.data());
}

Status TraceWriter::writeCompileReports(const std::vector<CompileReportRow>& rows) {
  Handle group(ensureGroup(file_, "/compile"), H5Gclose);
  Handle type(H5Tcreate(H5T_COMPOUND, sizeof(CompileReportRow)), H5Tclose);
  H5Tinsert(type, "chip", HOFFSET(CompileReportRow, chip), H5T_NATIVE_INT32);
#define TSP_FIELD(name, member) H5Tinsert(type, name, HOFFSET(CompileReportRow, member), H5T_NATIVE_INT64)
  TSP_FIELD("cycles", cycles);
  TSP_FIELD("list_cycles", listCycles);
  TSP_FIELD("lower_bound", lowerBound);
  TSP_FIELD("critical_path", criticalPath);
  TSP_FIELD("busiest_resource", busiestResource);
  TSP_FIELD("sram_peak_bytes", sramPeakBytes);
  TSP_FIELD("sram_footprint_bytes", sramFootprintBytes);
  TSP_FIELD("sram_capacity_bytes", sramCapacityBytes);
  H5Tinsert(type, "spills", HOFFSET(CompileReportRow, spills), H5T_NATIVE_INT32);
  TSP_FIELD("mem_accesses", memAccesses);
  TSP_FIELD("delayed_mem_accesses", delayedMemAccesses);
  TSP_FIELD("tasks", tasks);
#undef TSP_FIELD
  return writeRows(file_, "/compile/reports", type, {rows.size()}, rowsOfRank0(rank_, rows.size()), rows.data());
}

Status TraceWriter::markPartial(std::int64_t reachedCycle) {
  Handle group(H5Gopen2(file_, "/meta", H5P_DEFAULT), H5Gclose);
  if (!group.ok() || H5Adelete(group, "partial") < 0) return ioError("cannot mark the trace partial");
  if (auto s = numberAttribute(group, "partial", H5T_NATIVE_INT, 1); !s) return s;
  return numberAttribute(group, "reached_cycle", H5T_NATIVE_INT64, reachedCycle);
}

Status TraceWriter::createC2cEvents(std::int64_t rows) {
  Handle group(ensureGroup(file_, "/events"), H5Gclose);
  Handle type(c2cEventType(), H5Tclose);
  return createEventTable<C2cEventRow>(file_, "/events/c2c", type, rows);
}

Status TraceWriter::createInstructionEvents(std::int64_t rows, const std::string& opcodeNames) {
  Handle group(ensureGroup(file_, "/events"), H5Gclose);
  Handle type(instructionEventType(), H5Tclose);
  if (auto s = createEventTable<InstructionEventRow>(file_, "/events/instructions", type, rows); !s) return s;
  Handle dataset(H5Dopen2(file_, "/events/instructions", H5P_DEFAULT), H5Dclose);
  return stringAttribute(dataset, "opcode_names", opcodeNames);
}

Status TraceWriter::writeC2cEvents(const EventRows<C2cEventRow>& rows) {
  Handle type(c2cEventType(), H5Tclose);
  return writeEventRows(file_, "/events/c2c", type, rows);
}

Status TraceWriter::writeInstructionEvents(const EventRows<InstructionEventRow>& rows) {
  Handle type(instructionEventType(), H5Tclose);
  return writeEventRows(file_, "/events/instructions", type, rows);
}

Status TraceWriter::commit(const std::string& path) {
  // Every rank has written all it had; the reserve goes before any rank starts closing.
  MPI_Barrier(comm_);
  if (rank_ == 0) std::remove(reservePath(tempPath_).c_str());
  MPI_Barrier(comm_);
  if (H5Fclose(file_) < 0) {  // a full disk fails here too: no collective after it
    file_ = -1;
    abandon();
    failedHere_ = true;
    return ioError(fmt::format("cannot close the trace {}", tempPath_));
  }
  file_ = -1;
  int ok = 1;
  MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, comm_);  // every rank closed it
  if (rank_ == 0) ok = std::rename(tempPath_.c_str(), path.c_str()) == 0;
  if (rank_ == 0 && !ok) {
    failedHere_ = true;
    std::remove(tempPath_.c_str());  // nothing is left behind
  }
  MPI_Bcast(&ok, 1, MPI_INT, 0, comm_);
  if (!ok) return makeError(ExitCode::kInternal, fmt::format("cannot close or rename the trace into {}", path));
  return {};
}

void TraceWriter::discard() {
  if (file_ >= 0) H5Fclose(file_);
  file_ = -1;
  if (rank_ == 0) {
    std::remove(tempPath_.c_str());
    std::remove(reservePath(tempPath_).c_str());
  }
}

void TraceWriter::abandon() {
  file_ = -1;  // not closed: closing is collective
  std::remove(tempPath_.c_str());
  std::remove(reservePath(tempPath_).c_str());
}

}  // namespace tsp::runtime
