// Internal to the Chrome trace reader and writer: the file counts microseconds, the Trace seconds
// (defined in chrome_trace.cpp, next to the writer's conversion the other way).
#pragma once

namespace mgpu::trace::chrome_detail {

double to_seconds(double micros);

}  // namespace mgpu::trace::chrome_detail
