#include "core/trace/trace_files.h"

#include <algorithm>

#include <fmt/format.h>

#include "core/runtime/input_file.h"

namespace mgpu::trace {

bool all_kineto(const std::vector<std::string>& paths) {
  return !paths.empty() && std::all_of(paths.begin(), paths.end(),
                                       [](const std::string& p) { return is_kineto_file(p); });
}

RunTrace read_run_trace(const std::vector<std::string>& paths, const KinetoOptions& options) {
  if (paths.empty()) throw TraceFormatError("no trace given");
  RunTrace run;
  if (paths.size() == 1 && !is_kineto_file(paths[0])) {
    run.trace = read_chrome_trace(paths[0]);
    return run;
  }
  std::vector<std::filesystem::path> files;
  for (const std::string& p : paths) {
    if (!is_kineto_file(p))
      throw TraceFormatError(fmt::format(
          "{}: not a PyTorch profiler trace, so it cannot be a rank of the same run as the "
          "others (to put two runs side by side: mgpu viz --compare A B)",
          echo_input(p, 120)));
    for (auto& f : kineto_files_in(p)) files.push_back(std::move(f));
  }
  KinetoTrace k = read_kineto_traces(files, options);
  run.trace = std::move(k.trace);
  run.launch_end = std::move(k.launch_end);
  run.host = std::move(k.host);
  run.kineto = true;
  return run;
}

}  // namespace mgpu::trace
