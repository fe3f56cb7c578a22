// Fuzz target: the PyTorch profiler (Kineto) reader and the analysis `mgpu analyze` runs on what
// it reads. Any input either parses or raises TraceFormatError; it never crashes, hangs, or
// allocates without bound (ASan/UBSan report what slips through).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "core/trace/breakdown.h"
#include "core/trace/kineto_reader.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace mgpu::trace;
  try {
    const KinetoTrace k = parse_kineto_traces(
        {std::string_view(reinterpret_cast<const char*>(data), size)}, {"fuzz"});
    breakdown_steps(k.trace, k.launch_end);  // what `mgpu analyze` runs
    const Interval whole = analysis_window(k.trace);
    for (int rank = 0; rank < k.trace.num_ranks; ++rank) top_kernels(k.trace, rank, whole, 5);
  } catch (const TraceFormatError&) {
  }
  return 0;
}
