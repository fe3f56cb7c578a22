// `mgpu viz [trace.json ...] [--screenshot out.png --width W --height H --presentation
//  --compare --highlight GROUP]`.
#pragma once
#include <iosfwd>
#include <string>
#include <vector>

#include "core/runtime/trace_event.h"

namespace mgpu::lessons {

int cmd_viz(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

// Opens the dashboard on an in-memory trace (for `mgpu run ... --viz`). Returns an exit code.
int show_trace(const trace::Trace& trace, const std::string& lesson_name, std::ostream& err);

}  // namespace mgpu::lessons
