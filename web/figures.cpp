// Figures of the classroom's runs, formatted the same on every build (fmt, fixed precision).
#include "web/figures.h"

#include <fmt/format.h>

namespace mgpu::web {

std::string classroom_figures(const std::vector<viz::TraceView>& views) {
  std::string out;
  for (const viz::TraceView& view : views) {
    out += fmt::format("run: {}\n", viz::describe_run(view));
    out += fmt::format("theory: {}\n", viz::describe_predictions(view));
    for (int r = 0; r < view.num_ranks(); ++r) {
      const viz::RankSummary& s = view.summary(r);
      out += fmt::format(
          "rank {} busy {:.3f} us  comm {:.3f} us (wait {:.3f})  idle {:.3f} us  bubble {:.1f}%  "
          "overlap {:.1f}%  sent {} B  peak {} B\n",
          r, s.busy * 1e6, s.comm * 1e6, s.comm_wait * 1e6, s.idle * 1e6, s.bubble * 100,
          s.overlap * 100, s.bytes_sent, s.peak_bytes);
    }
  }
  return out;
}

}  // namespace mgpu::web
