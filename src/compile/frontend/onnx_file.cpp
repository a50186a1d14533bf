// Reading an ONNX file: mapped, its protobuf walked field by field so that initializers' raw data is not copied.
#include "compile/frontend/onnx_file.h"

#include <climits>
#include <cstdint>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/wire_format_lite.h>

#include "support/files.h"

namespace tsp::frontend {

namespace {

// Protobuf field numbers of onnx.proto: ModelProto.graph, GraphProto.initializer, TensorProto.raw_data.
constexpr std::uint32_t kModelGraph = 7;
constexpr std::uint32_t kGraphInitializer = 5;
constexpr std::uint32_t kTensorRawData = 9;

// One field of a serialized message: its bytes from the tag on, and its payload when length-delimited.
struct Field {
  std::uint32_t number = 0;
  std::string_view whole;    // tag, length and payload
  std::string_view payload;  // length-delimited fields only
  bool delimited = false;
};

// Calls visit(field) for every field of the message in bytes; false when the bytes do not parse.
template <class Visit>
bool walkFields(std::string_view bytes, Visit&& visit) {
  if (bytes.size() > static_cast<size_t>(INT_MAX)) return false;
  const auto* base = reinterpret_cast<const std::uint8_t*>(bytes.data());
  google::protobuf::io::CodedInputStream in(base, static_cast<int>(bytes.size()));
  for (;;) {
    const auto begin = static_cast<size_t>(in.CurrentPosition());
    const std::uint32_t tag = in.ReadTag();
    if (tag == 0) return begin == bytes.size();
    Field field;
    field.number = tag >> 3;
    if (google::protobuf::internal::WireFormatLite::GetTagWireType(tag) ==
        google::protobuf::internal::WireFormatLite::WIRETYPE_LENGTH_DELIMITED) {
      std::uint32_t length = 0;
      if (!in.ReadVarint32(&length)) return false;
      const auto start = static_cast<size_t>(in.CurrentPosition());
      if (!in.Skip(static_cast<int>(length))) return false;
      field.payload = bytes.substr(start, length);
      field.delimited = true;
    } else if (!google::protobuf::internal::WireFormatLite::SkipField(&in, tag)) {
      return false;
    }
    field.whole = bytes.substr(begin, static_cast<size_t>(in.CurrentPosition()) - begin);
    visit(field);
  }
}

// A serialized TensorProto parsed from its fields minus raw_data, whose bytes `raw` views; false
// when the bytes do not parse.
bool parseTensor(std::string_view bytes, onnx::TensorProto& tensor, std::optional<std::string_view>& raw) {
  std::string rest;
  return walkFields(bytes, [&](const Field& f) {
           if (f.number == kTensorRawData && f.delimited) raw = f.payload;
           else rest.append(f.whole);
         }) &&
         tensor.ParseFromString(rest);
}

Diagnostic notOnnx(const std::string& path) {
  return modelError(path, "not a valid ONNX model (the protobuf does not parse or has no graph)");
}

}  // namespace

Expected<std::shared_ptr<const MappedFile>> MappedFile::open(const std::string& path) {
  // A FIFO or device would block open() or never end: only regular files are read.
  if (existsButNotRegular(path)) return modelError(path, "the ONNX file is not a regular file");
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  struct stat info {};
  if (fd < 0 || ::fstat(fd, &info) != 0 || !S_ISREG(info.st_mode)) {
    if (fd >= 0) ::close(fd);
    return modelError(path, "cannot open the ONNX file");
  }
  const auto size = static_cast<size_t>(info.st_size);
  void* data = size == 0 ? nullptr : ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (data == MAP_FAILED) return modelError(path, "cannot map the ONNX file into memory");
  return std::shared_ptr<const MappedFile>(new MappedFile(static_cast<const char*>(data), size));
}

void MappedFile::release(std::string_view range) const {
  const auto page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
  const auto begin = reinterpret_cast<std::uintptr_t>(range.data()), end = begin + range.size();
  const std::uintptr_t first = (begin + page - 1) / page * page, last = end / page * page;
  if (range.empty() || begin < reinterpret_cast<std::uintptr_t>(data_) ||
      end > reinterpret_cast<std::uintptr_t>(data_) + size_ || first >= last)
    return;
  // Advice only: a kernel that declines keeps the pages, which changes memory, not values.
  ::madvise(reinterpret_cast<void*>(first), last - first, MADV_DONTNEED);
}

MappedFile::~MappedFile() {
  if (data_) ::munmap(const_cast<char*>(data_), size_);
}

Expected<OnnxFile> readOnnxFile(const std::string& path) {
  auto mapping = MappedFile::open(path);
  if (!mapping) return mapping.error();
  OnnxFile file;
  file.mapping = *mapping;
  // The model and its graph are parsed from their fields minus the initializers; each initializer
  // from its fields minus raw_data, whose bytes stay in the mapping.
  std::string modelRest, graphRest;
  bool hasGraph = false, ok = true;
  std::vector<onnx::TensorProto> initializers;
  auto tensor = [&](std::string_view bytes) {
    onnx::TensorProto t;
    std::optional<std::string_view> raw;
    ok = ok && parseTensor(bytes, t, raw);
    initializers.push_back(std::move(t));
    file.initializerRaw.push_back(raw);
  };
  const bool parsed = walkFields(file.mapping->bytes(), [&](const Field& f) {
    if (f.number != kModelGraph || !f.delimited) {
      modelRest.append(f.whole);
      return;
    }
    hasGraph = true;
    ok = ok && walkFields(f.payload, [&](const Field& g) {
      if (g.number == kGraphInitializer && g.delimited) tensor(g.payload);
      else graphRest.append(g.whole);
    });
  });
  if (!parsed || !ok || !hasGraph || !file.model.ParseFromString(modelRest) || !file.model.mutable_graph()->ParseFromString(graphRest))
    return notOnnx(path);
  for (auto& t : initializers) *file.model.mutable_graph()->add_initializer() = std::move(t);
  return file;
}

Expected<TensorFile> readTensorFile(const std::string& path) {
  auto mapping = MappedFile::open(path);
  if (!mapping) return modelError(path, "cannot open the tensor file");
  TensorFile file;
  file.mapping = *mapping;
  if (!parseTensor(file.mapping->bytes(), file.tensor, file.raw)) return modelError(path, "not a valid onnx.TensorProto");
  return file;
}

}  // namespace tsp::frontend
