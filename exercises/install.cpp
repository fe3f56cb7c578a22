// The student's side of the exercise table (`--impl mine`).
#include "exercises/exercises.h"
#include "exercises/probe.h"

namespace mgpu::mine {

namespace {
constexpr const char* kSide = "mine";
using ex::probe_all_reduce;
using ex::probe_column_parallel;
using ex::probe_sharded_step;
}  // namespace

#include "exercises/exercise_table.inc"

}  // namespace mgpu::mine
