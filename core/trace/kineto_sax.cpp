// The Kineto reader's streaming parser: nlohmann's SAX callbacks fill one small record per
// trace event (reused), and each finished record is classified at once (kineto_classify.cpp), so
// no document tree is ever built.
#include <cmath>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/trace/kineto_event.h"
#include "core/trace/kineto_raw.h"

namespace mgpu::trace::kineto {

namespace {

using nlohmann::json;

// Depths, counted in open containers: 1 the root object, 2 a top-level value (the traceEvents
// array, distributedInfo), 3 one trace event, 4 its args. A file that is a bare array of events
// (Chrome's "JSON Array Format", which PyTorch builds without Kineto export) has the events one
// level up.
constexpr int kRootDepth = 1;

class KinetoSax {
 public:
  explicit KinetoSax(RawRank& out) : out_(out) {}

  bool null() { return scalar(Scalar{}); }
  bool boolean(bool) { return scalar(Scalar{}); }
  bool number_integer(json::number_integer_t v) {
    return scalar(Scalar{Scalar::Kind::number, static_cast<double>(v), v});
  }
  bool number_unsigned(json::number_unsigned_t v) {
    const auto i = v > uint64_t(INT64_MAX) ? INT64_MAX : static_cast<int64_t>(v);
    return scalar(Scalar{Scalar::Kind::number, static_cast<double>(v), i});
  }
  bool number_float(json::number_float_t v, const std::string&) {
    const bool integral = std::nearbyint(v) == v && std::fabs(v) < 9e18;
    return scalar(Scalar{Scalar::Kind::number, v, integral ? static_cast<int64_t>(v) : -1});
  }
  bool string(std::string& v) { return scalar(Scalar{Scalar::Kind::text, 0, -1, &v}); }
  bool binary(json::binary_t&) { return scalar(Scalar{}); }

  bool key(std::string& k) {
    if (depth_ == kRootDepth)
      top_key_ = k;
    else if (depth_ == 2 && top_key_ == "distributedInfo")
      dist_key_ = k;
    else if (in_event() && depth_ == event_depth())
      event_key_ = k;
    else if (in_args())
      arg_key_ = k;
    return true;
  }

  bool start_object(std::size_t) {
    ++depth_;
    if (depth_ == 2 && top_key_ == "traceEvents")
      fail("traceEvents must be an array of events, got an object");
    if (in_events_ && depth_ == event_depth()) {
      event_.clear();
      event_.index = index_;
    }
    if (in_event() && depth_ == args_depth()) args_open_ = event_key_ == std::string_view("args");
    return true;
  }
  bool end_object() {
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
  bool start_array(std::size_t) {
    ++depth_;
    const bool bare = depth_ == kRootDepth;  // the document is the array of events
    if (bare || (depth_ == 2 && top_key_ == "traceEvents")) {
      in_events_ = saw_events_ = true;
      events_depth_ = depth_;
    }
    return true;
  }
  bool end_array() {
    if (in_events_ && depth_ == events_depth_) in_events_ = false;
    --depth_;
    return true;
  }

  bool parse_error(std::size_t position, const std::string&, const nlohmann::detail::exception& e) {
    const bool truncated = std::string_view(e.what()).find("end of input") != std::string::npos;
    fail(fmt::format("{} JSON at byte {}{}", truncated ? "truncated" : "invalid", position,
                     truncated ? "" : fmt::format(" ({})", e.what())));
    return false;
  }

  void finish() const {
    if (!saw_events_)
      fail("no \"traceEvents\" array (nor a bare array of events): not a PyTorch profiler trace");
  }

 private:
  int event_depth() const { return events_depth_ + 1; }
  int args_depth() const { return events_depth_ + 2; }
  bool in_event() const { return in_events_ && depth_ >= event_depth(); }
  bool in_args() const { return args_open_ && depth_ == args_depth(); }

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

  [[noreturn]] void fail(const std::string& what) const {
    throw TraceFormatError(fmt::format("{}: {} {}", out_.source, what, kineto_limits_note()));
  }

  RawRank& out_;
  int depth_ = 0;
  int events_depth_ = 2;
  bool in_events_ = false, saw_events_ = false, args_open_ = false;
  int64_t index_ = 0;
  std::string top_key_, dist_key_, event_key_, arg_key_;
  EventRecord event_;
};

template <class Input>
RawRank parse_with(Input&& input, const std::string& source) {
  RawRank out;
  out.source = source;
  KinetoSax sax(out);
  try {
    json::sax_parse(std::forward<Input>(input), &sax);
  } catch (const TraceFormatError&) {
    throw;
  } catch (const std::exception& e) {  // a limit of the input (the stream's byte cap, ...)
    throw TraceFormatError(fmt::format("{}: {}", source, e.what()));
  }
  sax.finish();
  return out;
}

}  // namespace

RawRank parse_raw_text(std::string_view text, const std::string& source) {
  return parse_with(text, source);
}

RawRank parse_raw_stream(std::istream& in, const std::string& source) {
  return parse_with(in, source);
}

}  // namespace mgpu::trace::kineto
