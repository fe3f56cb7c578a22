// Fuzz target: the Chrome trace reader. Any input either parses or raises TraceFormatError; it
// never crashes, hangs, or allocates without bound (ASan/UBSan report what slips through).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "core/trace/chrome_trace.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    mgpu::trace::parse_chrome_trace(std::string_view(reinterpret_cast<const char*>(data), size),
                                    "fuzz");
  } catch (const mgpu::trace::TraceFormatError&) {
  }
  return 0;
}
