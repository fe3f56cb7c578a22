// Reference checkpoint interval (exercise 10). A job that checkpoints every tau seconds of work
// at C seconds each, failing every M seconds on average, wastes about C / tau (writing) plus
// tau / (2 M) (half an interval redone per failure) of its time; the derivative vanishes at
// tau* = sqrt(2 C M) (Young 1974; Daly 2006 adds higher-order terms). A failure at step S with a
// checkpoint after every k-th step redoes the steps since floor(S / k) k.
#include <cmath>
#include <stdexcept>

#include "exercises/exercises.h"

namespace mgpu::reference {

double young_daly_interval(double checkpoint_cost, double mtbf) {
  if (!(checkpoint_cost > 0) || !(mtbf > 0) || !std::isfinite(checkpoint_cost) ||
      !std::isfinite(mtbf))
    throw std::invalid_argument("the checkpoint cost and the MTBF must be finite and > 0");
  return std::sqrt(2 * checkpoint_cost * mtbf);
}

ex::LostWork lost_work(int failed_step, int every, double step_seconds) {
  if (failed_step < 0 || every < 0 || !(step_seconds >= 0))
    throw std::invalid_argument("the step, the interval and the step time must be >= 0");
  const int saved = every > 0 ? failed_step / every * every : 0;
  return {saved, (failed_step - saved) * step_seconds};
}

}  // namespace mgpu::reference
