// The run every paradigm's equivalence test compares with: the plain model on one device, the
// same seed and the same global batches, trained `steps` optimizer steps; every parameter and
// optimizer-state tensor by name (the names a layout's shards() maps into).
#pragma once
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/selected_seams.h"
#include "core/data/task.h"
#include "core/model/gpt.h"
#include "core/optim/optimizer.h"
#include "core/world/world.h"

namespace mgpu::testing {

using FullTensors = std::map<std::string, std::vector<float>>;
using MakeOptimizer = std::function<std::unique_ptr<optim::Optimizer>(const ParamList&)>;

// `losses`, when given, receives each step's mean loss.
inline FullTensors train_single_device_reference(const GPTConfig& cfg, const data::Task& task,
                                                 const MakeOptimizer& make_optimizer, int steps,
                                                 int batch, int seq,
                                                 std::vector<float>* losses = nullptr) {
  FullTensors full;
  World world(WorldOptions{.ranks = 1, .all_reduce = selected_all_reduce()});
  world.run([&](RankContext&) {
    GPT model(cfg);
    auto opt = make_optimizer(model.params());
    for (int step = 0; step < steps; ++step) {
      data::Batch b = task.sample(step, batch, seq);
      opt->zero_grad();
      const float loss = model.forward_backward(b.tokens, b.targets, batch, seq);
      if (losses) losses->push_back(loss);
      opt->step();
    }
    for (Param* p : model.params()) full[p->name] = p->data.to_vector();
    for (const auto& s : opt->state()) full[s.name] = s.tensor.to_vector();
  });
  return full;
}

}  // namespace mgpu::testing
