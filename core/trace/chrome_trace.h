// Reads and writes a Trace as Chrome Trace Event JSON, the format Perfetto (ui.perfetto.dev) and
// chrome://tracing open. One file holds every rank of a run:
//
//   {
//     "traceEvents": [
//       {"ph":"M", "name":"process_name", "pid":0, "tid":0, "args":{"name":"GPU 0"}},
//       {"ph":"M", "name":"thread_name",  "pid":0, "tid":1, "args":{"name":"comm"}},
//       {"ph":"X", "name":"fwd mb0", "cat":"forward", "pid":0, "tid":0,
//        "ts":12.5, "dur":3.25, "args":{"microbatch":0, "flops":1e9}},
//       {"ph":"C", "name":"memory", "pid":0, "tid":0, "ts":12.5,
//        "args":{"parameters":1024, "gradients":0, ...}},
//       ...
//     ],
//     "displayTimeUnit": "ns",
//     "mgpu": {"format":"mgpu-trace", "version":1, "num_ranks":4, "metadata":{...}}
//   }
//
// - pid = rank, tid = lane (0 compute, 1 comm, 2 step). "M" events name the processes "GPU <r>"
//   and the threads after their lanes, with sort indices so viewers keep that order.
// - ts and dur are MICROseconds (the format's unit); the Trace keeps seconds. seconds * 1e6 / 1e6
//   is not always the same double, so when it is not, the writer also stores the exact seconds in
//   the event fields "ts_s" / "dur_s" (outside "args", which viewers would show or plot) and the
//   reader prefers them. Round trips are therefore bit-exact and most events carry no extra field.
// - Event args that are absent (-1, 0 or empty, see trace::Event) are omitted.
// - "mgpu" carries Trace::metadata nested under "metadata" (so no metadata key can collide with
//   format/version/num_ranks) and the rank count, which events alone cannot tell (an idle rank).
//
// The reader also loads plain Chrome traces (no "mgpu" object) best-effort: "X" and "memory" "C"
// events are kept, distinct pids become ranks 0..n-1 in increasing pid order, tids 0..2 map to
// lanes and any other tid to the compute lane. Other phases are ignored in both kinds of file.
#pragma once
#include <filesystem>
#include <iosfwd>
#include <stdexcept>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "core/runtime/trace_event.h"

namespace mgpu::trace {

inline constexpr const char* kTraceFormat = "mgpu-trace";
inline constexpr int kTraceVersion = 1;
// What the reader accepts (a hostile or corrupt trace must not make the dashboard draw forever or
// allocate per rank without bound): timestamps finite in [0, 1e12] s (profilers count from the
// Unix epoch), the whole trace spanning at most 1e7 s (115 days), and at most 4096 ranks.
inline constexpr double kMaxTraceSeconds = 1e12;
inline constexpr double kMaxTraceSpan = 1e7;
inline constexpr int kMaxTraceRanks = 4096;

// Everything the reader rejects: one line naming the source and what is wrong with it.
class TraceFormatError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

nlohmann::json to_chrome_json(const Trace& trace);
void write_chrome_trace(const Trace& trace, std::ostream& out);
// Written atomically (core/runtime/output_file.h); std::invalid_argument with one line when the
// path cannot hold a file (a fifo, a device, a missing folder) or the write fails.
void write_chrome_trace(const Trace& trace, const std::filesystem::path& path);

// `source` names the input in error messages (a path, "<string>", ...).
Trace from_chrome_json(const nlohmann::json& doc, std::string_view source = "<json>");
Trace parse_chrome_trace(std::string_view text, std::string_view source = "<string>");
Trace read_chrome_trace(const std::filesystem::path& path);

}  // namespace mgpu::trace
