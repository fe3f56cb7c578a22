// Exercise 08: ZeRO stage 1's sharded optimizer step. Replace the bodies with your implementation
// (see docs/exercises/08-zero-sharded-step.md), then run `mgpu run zero --stage 1 --impl mine`:
// your chunks cut every unit of the run, and your step updates and re-assembles the model.
#include "exercises/exercises.h"

namespace mgpu::mine {

namespace {
[[noreturn]] void todo() {
  throw ex::NotImplemented("not implemented yet: see docs/exercises/08-zero-sharded-step.md");
}
}  // namespace

std::pair<int64_t, int64_t> zero_owned_chunk(int64_t numel, int ranks, int rank) {
  (void)numel, (void)ranks, (void)rank;
  todo();  // TODO: numel / ranks each, and one more for the first numel % ranks ranks
}

void zero_sharded_step(comm::Comm& dp, const std::vector<parallel::FlatUnit>& units,
                       const std::function<void()>& update_owned) {
  (void)dp, (void)units, (void)update_owned;
  todo();  // TODO: reduce-scatter (avg) into my chunk, update_owned(), all-gather the params
}

}  // namespace mgpu::mine
