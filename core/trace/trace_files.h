// One run's trace from what the user names: the project's own trace file (written with --trace),
// or PyTorch profiler (Kineto) traces: one or several files (one per rank, .json or .json.gz) or
// a folder of them. `mgpu analyze` and `mgpu viz` open traces through here.
#pragma once
#include <string>
#include <vector>

#include "core/trace/kineto_reader.h"

namespace mgpu::trace {

struct RunTrace {
  Trace trace;
  std::vector<double> launch_end;  // per event; empty for the project's own traces
  std::vector<HostActivity> host;  // per rank; empty for the project's own traces
  bool kineto = false;
};

// True when every path is a Kineto trace or a folder (see is_kineto_file).
bool all_kineto(const std::vector<std::string>& paths);

// Throws TraceFormatError (one line) on a bad file, and when the paths mix the project's own
// trace with others (compare runs with `mgpu viz --compare` instead).
RunTrace read_run_trace(const std::vector<std::string>& paths, const KinetoOptions& options = {});

}  // namespace mgpu::trace
