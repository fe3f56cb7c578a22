// The fault lab's survival acts: a rank lost at a step ends the job with one line; the job
// resumes from its last checkpoint on half the ranks (the same global batch, so the same
// parameters as an uninterrupted run, up to the order of float sums); the work lost is the steps
// since that checkpoint times the step time. Then the checkpoint interval: Young/Daly's optimum
// beside a seeded replay of a large job at Llama 3's published failure rate.
#include <cstdio>
#include <filesystem>
#include <ostream>

#include <fmt/format.h>
#include <fmt/ostream.h>
#include <unistd.h>

#include "core/runtime/faults.h"
#include "core/theory/checkpoint_interval.h"
#include "exercises/selection.h"
#include "lessons/ddp.h"
#include "lessons/faults.h"
#include "lessons/training.h"

namespace mgpu::lessons {

namespace {

// A scratch checkpoint of this process, removed when the act ends.
class ScratchFile {
 public:
  explicit ScratchFile(const std::string& name)
      : path_((std::filesystem::temp_directory_path() /
               fmt::format("mgpu_faults_{}_{}", ::getpid(), name))
                  .string()) {}
  ~ScratchFile() { std::remove(path_.c_str()); }
  ScratchFile(const ScratchFile&) = delete;
  ScratchFile& operator=(const ScratchFile&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace

int print_survival(const CommonOptions& c, std::ostream& out) {
  const FailRank fail = parse_fail_rank(c.fail_rank);
  const int every = c.checkpoint_every > 0 ? c.checkpoint_every : std::max(1, c.steps / 2);
  DataParallelOptions d;
  d.log_losses = false;
  const DataParallelResult whole = train_data_parallel(fault_free(c), d, out);

  ScratchFile saved("lost.ckpt");
  CommonOptions lost = fault_free(c);
  lost.fail_rank = c.fail_rank;
  lost.checkpoint = saved.path();
  lost.checkpoint_every = every;
  fmt::print(out, "\n5. a lost rank: --fail-rank {} --checkpoint-every {} ({} ranks, {} steps)\n",
             c.fail_rank, every, c.ranks, c.steps);
  int resumable = 0;
  try {
    train_data_parallel(lost, d, out);
    fmt::print(out, "  the rank was not lost: nothing to resume\n");
    return 1;
  } catch (const train::JobInterrupted& e) {
    const std::string line = e.what();  // "...; last checkpoint PATH at step S: ..."
    fmt::print(out, "  the job ends: {}; last checkpoint at step {}\n",
               line.substr(0, line.find("; ")), e.resumable_step());
    resumable = e.resumable_step();
  }
  const double step = whole.step_seconds;
  const theory::LostWork loss =  // exercise 10, as --impl selected
      ex::selected_seams().checkpoint.lost_work(fail.step, every, step);
  fmt::print(out,
             "  lost work   (failed step - checkpoint step) x step time = ({} - {}) x {} = {}\n",
             fail.step, loss.saved_step, format_seconds(step), format_seconds(loss.seconds));
  if (loss.saved_step != resumable)
    fmt::print(out, "  (exercise 10 says step {}, the job resumes from step {})\n", loss.saved_step,
               resumable);

  CommonOptions resumed = fault_free(c);
  resumed.ranks = c.ranks / 2;
  resumed.resume = saved.path();
  const DataParallelResult after = train_data_parallel(resumed, d, out);
  fmt::print(out,
             "  resumed on {} ranks from step {} to {} with the same global batch {}:\n"
             "  max |parameter difference| against the uninterrupted {}-rank run = {:.1e} "
             "(float sums in another order)\n",
             resumed.ranks, after.first_step, c.steps, whole.global_batch, c.ranks,
             max_param_difference(whole.params, after.params));
  return 0;
}

void print_checkpoint_interval(std::ostream& out, double checkpoint_cost, double mtbf_hours) {
  const double mtbf = mtbf_hours * 3600, cost = checkpoint_cost;
  const double best = ex::selected_seams().checkpoint.optimal_interval(cost, mtbf);  // ex 10
  fmt::print(out,
             "\n6. the checkpoint interval: MTBF {:.2f} h (Llama 3: 419 unexpected interruptions "
             "in 54 days, 16,384 GPUs), checkpoint {:g} s\n"
             "  Young/Daly optimum  tau* = sqrt(2 x C x MTBF) = sqrt(2 x {:g} s x {:.0f} s) = "
             "{:.0f} s ({:.1f} min)\n",
             mtbf_hours, cost, cost, mtbf, best, best / 60);
  fmt::print(out, "  interval          waste C/tau + tau/(2 MTBF)   waste, replayed   failures\n");
  const double work = 1000 * mtbf;  // long enough that the replay settles
  for (double x : {0.25, 0.5, 1.0, 2.0, 4.0}) {
    const double tau = x * best;
    const theory::CheckpointRun run =
        theory::simulate_checkpointing(work, tau, cost, mtbf, 0, 2024);
    fmt::print(out, "  {:4g} tau* {:>6.0f} s      {:6.2f}%                    {:6.2f}%   {:>8}{}\n",
               x, tau, 100 * theory::checkpoint_waste(tau, cost, mtbf), 100 * run.waste(),
               run.failures, x == 1.0 ? "  <- optimum" : "");
  }
  fmt::print(out,
             "  (replay: {:.0f} h of work, exponential failures at that MTBF, seed 2024, restart "
             "free; shorter intervals pay in checkpoints, longer ones in lost work)\n",
             work / 3600);
}

}  // namespace mgpu::lessons
