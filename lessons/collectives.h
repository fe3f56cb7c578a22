// The collectives lesson, callable from tests.
#pragma once
#include <iosfwd>
#include <memory>
#include <string>
#include <vector>

#include "core/runtime/trace_event.h"
#include "lessons/lesson.h"

namespace mgpu::lessons {

struct CollectivesOptions {
  std::vector<std::string> ops = {"all_reduce", "reduce_scatter", "all_gather", "all_to_all",
                                  "broadcast"};
  int64_t min_bytes = 1024;
  int64_t max_bytes = 4 << 20;
  int iters = 5;
};

struct CollectivesRow {
  std::string kind;
  int64_t bytes;
  double seconds;  // measured (best of the iterations)
  double theory;   // alpha-beta prediction
  double busbw;    // bytes/s
  bool correct;
  int64_t sent_bytes = 0;     // measured: the most one rank's sends carried (trace sent_bytes)
  int64_t formula_bytes = 0;  // what the algorithm's formula says that rank sends
};

struct CollectivesResult {
  std::vector<CollectivesRow> rows;
  trace::Trace trace;
};

CollectivesResult run_collectives(const CommonOptions& c, const CollectivesOptions& o,
                                  std::ostream& out);
std::unique_ptr<Lesson> make_collectives_lesson();

}  // namespace mgpu::lessons
