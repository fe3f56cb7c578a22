#include "lessons/viz_command.h"

#include <ostream>

#include <fmt/format.h>
#include <fmt/ostream.h>

namespace mgpu::lessons {

int cmd_viz(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  (void)args;
  (void)out;
  fmt::print(err, "mgpu viz: error: the dashboard is not built yet; open the trace in Perfetto\n");
  return 2;
}

int show_trace(const trace::Trace& trace, const std::string& lesson_name, std::ostream& err) {
  (void)trace;
  (void)lesson_name;
  fmt::print(err, "mgpu: the dashboard is not built yet; open the trace in Perfetto\n");
  return 2;
}

}  // namespace mgpu::lessons
