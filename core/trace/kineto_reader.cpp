// The Kineto reader's files: plain or gzip JSON streamed through zlib (gzread passes plain files
// through unchanged), a folder's files, and the sniffing that tells a Kineto trace from the
// project's own.
#include "core/trace/kineto_reader.h"

#include <algorithm>
#include <memory>

#include <fmt/format.h>
#include <zlib.h>

#include "core/runtime/input_file.h"
#include "core/trace/kineto_assemble.h"
#include "core/trace/kineto_event.h"
#include "core/trace/kineto_raw.h"

namespace mgpu::trace {

namespace {

struct GzClose {
  void operator()(gzFile_s* f) const { gzclose(f); }
};
using GzHandle = std::unique_ptr<gzFile_s, GzClose>;

GzHandle open_gz(const std::filesystem::path& path) {
  GzHandle f(gzopen(path.c_str(), "rb"));
  if (!f) throw TraceFormatError(fmt::format("{}: cannot open for reading", path.string()));
  // zlib's buffer at most half the parser's chunk: zlib then reads (or inflates) straight into
  // the chunk instead of copying every byte once more.
  gzbuffer(f.get(), 256 << 10);
  return f;
}

// The decompressed bytes of a file, chunk by chunk, capped at kMaxKinetoFileBytes (a gzip bomb
// stops there).
class GzChunks {
 public:
  GzChunks(gzFile_s* file, std::string source) : file_(file), source_(std::move(source)) {}

  size_t operator()(char* buffer, size_t size) {
    const int n = gzread(file_, buffer, static_cast<unsigned>(size));
    if (n < 0) {
      int code = 0;
      throw TraceFormatError(
          fmt::format("{}: not readable as gzip or JSON ({})", source_, gzerror(file_, &code)));
    }
    total_ += n;
    if (total_ > kMaxKinetoFileBytes)
      throw TraceFormatError(fmt::format("{}: more than {} GiB of JSON {}", source_,
                                         kMaxKinetoFileBytes >> 30, kineto::kineto_limits_note()));
    return static_cast<size_t>(n);
  }

 private:
  gzFile_s* file_;
  std::string source_;
  int64_t total_ = 0;
};

kineto::RawRank read_raw_file(const std::filesystem::path& path) {
  const std::string source = echo_input(path.string(), 120);
  try {
    check_input_file(path.string(), "trace", kMaxKinetoFileBytes);
  } catch (const std::invalid_argument& e) {
    throw TraceFormatError(e.what());
  }
  GzHandle file = open_gz(path);
  return kineto::parse_raw_chunks(GzChunks(file.get(), source), source, true);
}

}  // namespace

bool is_kineto_file(const std::filesystem::path& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) return true;
  if (!std::filesystem::is_regular_file(path, ec)) return false;
  if (path.extension() == ".gz") return true;
  GzHandle file(gzopen(path.c_str(), "rb"));
  if (!file) return false;
  std::string head(64 << 10, '\0');
  const int n = gzread(file.get(), head.data(), static_cast<unsigned>(head.size()));
  head.resize(n > 0 ? n : 0);
  // A bare array of events: Chrome's JSON Array Format, which PyTorch writes without Kineto.
  if (const size_t first = head.find_first_not_of(" \t\r\n");
      first != std::string::npos && head[first] == '[')
    return true;
  for (const char* key :
       {"\"schemaVersion\"", "\"distributedInfo\"", "\"deviceProperties\"", "\"traceName\""})
    if (head.find(key) != std::string::npos) return true;
  return false;
}

std::vector<std::filesystem::path> kineto_files_in(const std::filesystem::path& path) {
  std::error_code ec;
  if (!std::filesystem::is_directory(path, ec)) return {path};
  std::vector<std::filesystem::path> files;
  for (const auto& entry : std::filesystem::directory_iterator(path, ec)) {
    const std::string name = entry.path().filename().string();
    const bool json = name.ends_with(".json") || name.ends_with(".json.gz");
    if (json && entry.is_regular_file(ec)) files.push_back(entry.path());
  }
  if (ec)
    throw TraceFormatError(fmt::format("{}: cannot list the folder ({})",
                                       echo_input(path.string(), 120), ec.message()));
  if (files.empty())
    throw TraceFormatError(fmt::format("{}: the folder holds no .json or .json.gz trace files",
                                       echo_input(path.string(), 120)));
  if (files.size() > static_cast<size_t>(kMaxKinetoFiles))
    throw TraceFormatError(fmt::format("{}: {} trace files; the reader takes at most {} ranks",
                                       echo_input(path.string(), 120), files.size(),
                                       kMaxKinetoFiles));
  std::sort(files.begin(), files.end());
  return files;
}

KinetoTrace read_kineto_traces(const std::vector<std::filesystem::path>& files,
                               const KinetoOptions& options) {
  if (files.empty()) throw TraceFormatError("no Kineto trace files given");
  if (files.size() > static_cast<size_t>(kMaxKinetoFiles))
    throw TraceFormatError(fmt::format("{} trace files; the reader takes at most {} ranks",
                                       files.size(), kMaxKinetoFiles));
  std::vector<kineto::RawRank> ranks;
  for (const auto& path : files) ranks.push_back(read_raw_file(path));
  return kineto::assemble(std::move(ranks), options);
}

KinetoTrace parse_kineto_traces(const std::vector<std::string_view>& texts,
                                const std::vector<std::string>& sources,
                                const KinetoOptions& options) {
  std::vector<kineto::RawRank> ranks;
  for (size_t i = 0; i < texts.size(); ++i)
    ranks.push_back(kineto::parse_raw_text(texts[i], i < sources.size() ? sources[i] : "<json>"));
  return kineto::assemble(std::move(ranks), options);
}

}  // namespace mgpu::trace
