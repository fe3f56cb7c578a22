// The Kineto reader's streaming parser: RapidJSON's SAX reader (iterative, so nesting costs heap,
// not stack) fills one small record per trace event (reused), and each finished record is
// classified at once (kineto_classify.cpp), so no document tree is ever built. Input arrives in
// chunks (a file through zlib, or a string), so memory does not grow with the file.
#include <cmath>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <rapidjson/error/en.h>
#include <rapidjson/reader.h>

#include "core/trace/kineto_chunk_stream.h"
#include "core/trace/kineto_event.h"
#include "core/trace/kineto_raw.h"

namespace mgpu::trace::kineto {

namespace {

// Depths, counted in open containers: 1 the root object, 2 a top-level value (the traceEvents
// array, distributedInfo), 3 one trace event, 4 its args. A file that is a bare array of events
// (Chrome's "JSON Array Format", which PyTorch builds without Kineto export) has the events one
// level up.
constexpr int kRootDepth = 1;

class KinetoSax {
 public:
  explicit KinetoSax(RawRank& out) : out_(out) {}

  bool Null() { return scalar(Scalar{}); }
  bool Bool(bool) { return scalar(Scalar{}); }
  bool Int(int v) { return Int64(v); }
  bool Uint(unsigned v) { return Int64(v); }
  bool Int64(int64_t v) { return number(static_cast<double>(v), v); }
  bool Uint64(uint64_t v) {
    const auto i = v > uint64_t(INT64_MAX) ? INT64_MAX : static_cast<int64_t>(v);
    return number(static_cast<double>(v), i);
  }
  bool Double(double v) {
    const bool integral = std::nearbyint(v) == v && std::fabs(v) < 9e18;
    return number(v, integral ? static_cast<int64_t>(v) : -1);
  }
  bool RawNumber(const char*, rapidjson::SizeType, bool) { return scalar(Scalar{}); }  // unused
  bool String(const char* s, rapidjson::SizeType n, bool) { return text(std::string_view(s, n)); }

  bool Key(const char* s, rapidjson::SizeType n, bool) {
    const std::string_view k(s, n);
    if (depth_ == kRootDepth)
      top_key_.assign(k);
    else if (depth_ == 2 && top_key_ == "distributedInfo")
      dist_key_.assign(k);
    else if (in_event() && depth_ == event_depth())
      event_key_.assign(k);
    else if (in_args())
      arg_key_.assign(k);
    return true;
  }

  bool StartObject() {
    open();
    if (depth_ == 2 && top_key_ == "traceEvents")
      fail("traceEvents must be an array of events, got an object");
    if (in_events_ && depth_ == event_depth()) {
      event_.clear();
      event_.index = index_;
    }
    if (in_event() && depth_ == args_depth()) args_open_ = event_key_ == "args";
    return true;
  }
  bool EndObject(rapidjson::SizeType) {
    if (in_event() && depth_ == event_depth()) {
      if (++out_.events > kMaxKinetoEvents)
        fail(fmt::format("more than {} trace events; the reader takes at most {} per file",
                         kMaxKinetoEvents, kMaxKinetoEvents));
      classify_event(event_, out_);
      ++index_;
    }
    if (depth_ == args_depth()) args_open_ = false;
    --depth_;
    return true;
  }
  bool StartArray() {
    open();
    const bool bare = depth_ == kRootDepth;  // the document is the array of events
    if (bare || (depth_ == 2 && top_key_ == "traceEvents")) {
      in_events_ = saw_events_ = true;
      events_depth_ = depth_;
    }
    return true;
  }
  bool EndArray(rapidjson::SizeType) {
    if (in_events_ && depth_ == events_depth_) in_events_ = false;
    --depth_;
    return true;
  }

  void finish() const {
    if (!saw_events_)
      fail("no \"traceEvents\" array (nor a bare array of events): not a PyTorch profiler trace");
  }

  [[noreturn]] void fail(const std::string& what) const {
    throw TraceFormatError(fmt::format("{}: {} {}", out_.source, what, kineto_limits_note()));
  }

 private:
  int event_depth() const { return events_depth_ + 1; }
  int args_depth() const { return events_depth_ + 2; }
  bool in_event() const { return in_events_ && depth_ >= event_depth(); }
  bool in_args() const { return args_open_ && depth_ == args_depth(); }

  bool number(double v, int64_t integer) {
    Scalar s;
    s.kind = Scalar::Kind::number;
    s.number = v;
    s.integer = integer;
    return scalar(s);
  }
  bool text(std::string_view v) {
    Scalar s;
    s.kind = Scalar::Kind::text;
    s.text = v;
    return scalar(s);
  }

  void open() {
    if (++depth_ > kMaxKinetoDepth)
      fail(fmt::format("JSON nested deeper than {} levels", kMaxKinetoDepth));
  }

  bool scalar(const Scalar& v) {
    if (depth_ == 0) fail("the document must be a JSON object with \"traceEvents\"");
    if (in_events_ && depth_ == events_depth_) {
      fail(fmt::format("traceEvents[{}] must be an object", index_));
    } else if (depth_ == 2 && top_key_ == "distributedInfo") {
      read_distributed_info(v);
    } else if (in_event() && depth_ == event_depth()) {
      read_event_field(event_key_, v, event_, out_);
    } else if (in_args()) {
      read_event_arg(arg_key_, v, event_);
    }
    return true;
  }

  void read_distributed_info(const Scalar& v) {
    if (dist_key_ != "rank" && dist_key_ != "world_size") return;
    if (v.kind != Scalar::Kind::number || v.integer < 0 || v.integer >= kMaxTraceRanks)
      fail(fmt::format("distributedInfo.{} must be an integer in 0..{}", dist_key_,
                       kMaxTraceRanks - 1));
    (dist_key_ == "rank" ? out_.rank : out_.world_size) = static_cast<int>(v.integer);
  }

  RawRank& out_;
  int depth_ = 0;
  int events_depth_ = 2;
  bool in_events_ = false, saw_events_ = false, args_open_ = false;
  int64_t index_ = 0;
  std::string top_key_, dist_key_, event_key_, arg_key_;
  EventRecord event_;
};

// An explicit stack instead of recursion. Numbers: RapidJSON's normal precision, which is exact
// (correctly rounded) for a decimal of at most 15-16 significant digits, as Kineto writes its
// microseconds ("1732841234567.891"); its full-precision mode kept every digit for a big-number
// fallback and cost about a tenth of the parse. UTF-8 is checked on the strings the reader keeps
// (kineto_classify.cpp), once per distinct string: checking every byte of the file cost about a
// fifth of the parse.
constexpr unsigned kParseFlags = rapidjson::kParseIterativeFlag;

}  // namespace

RawRank parse_raw_chunks(const ReadChunk& read, const std::string& source, bool prefetch) {
  RawRank out;
  out.source = source;
  KinetoSax sax(out);
  ChunkStream in(read, prefetch);
  rapidjson::Reader reader;
  const rapidjson::ParseResult result = reader.Parse<kParseFlags>(in, sax);
  if (result.IsError()) {
    // RapidJSON stops at a '\0' as at the end: one before the real end is a NUL byte in the file.
    const bool truncated = in.at_end();
    const std::string why = in.Peek() == '\0' ? "a NUL byte, which JSON text never holds"
                                              : rapidjson::GetParseError_En(result.Code());
    throw TraceFormatError(fmt::format("{}: {} JSON at byte {}{}", source,
                                       truncated ? "truncated" : "invalid", result.Offset(),
                                       truncated ? "" : fmt::format(" ({})", why)));
  }
  sax.finish();
  return out;
}

RawRank parse_raw_text(std::string_view text, const std::string& source) {
  size_t offset = 0;
  const ReadChunk read = [&](char* buffer, size_t size) {
    const size_t n = std::min(size, text.size() - offset);
    std::copy_n(text.data() + offset, n, buffer);
    offset += n;
    return n;
  };
  return parse_raw_chunks(read, source, false);  // a copy from memory: nothing to overlap
}

}  // namespace mgpu::trace::kineto
