// The reference side of the exercise table (the default, `--impl reference`).
#include "exercises/exercises.h"
#include "exercises/probe.h"

namespace mgpu::reference {

namespace {
constexpr const char* kSide = "reference";
using ex::probe_all_reduce;
using ex::probe_column_parallel;
using ex::probe_sharded_step;
}  // namespace

#include "exercises/exercise_table.inc"

}  // namespace mgpu::reference
