// The vocabulary of a schedule: action kinds and their names, the action builders, and where a
// stage's chunks sit in the model (virtual stages, neighbours, placements).
#include "core/parallel/pipeline/schedule.h"

#include <fmt/format.h>

namespace mgpu::pipeline {

const char* kind_name(ActionKind kind) {
  switch (kind) {
    case ActionKind::forward:
      return "forward";
    case ActionKind::backward:
      return "backward";
    case ActionKind::backward_input:
      return "backward_input";
    case ActionKind::backward_weight:
      return "backward_weight";
    case ActionKind::send_activation:
      return "send_activation";
    case ActionKind::recv_activation:
      return "recv_activation";
    case ActionKind::send_grad:
      return "send_grad";
    case ActionKind::recv_grad:
      return "recv_grad";
  }
  return "?";
}

bool is_compute(ActionKind kind) {
  return kind == ActionKind::forward || kind == ActionKind::backward ||
         kind == ActionKind::backward_input || kind == ActionKind::backward_weight;
}
bool is_communication(ActionKind kind) {
  return !is_compute(kind);
}

std::string Action::str() const {
  const std::string chunk_suffix = chunk > 0 ? fmt::format("c{}", chunk) : "";
  switch (kind) {
    case ActionKind::forward:
      return fmt::format("F{}{}", microbatch, chunk_suffix);
    case ActionKind::backward:
    case ActionKind::backward_input:
      return fmt::format("B{}{}", microbatch, chunk_suffix);
    case ActionKind::backward_weight:
      return fmt::format("W{}{}", microbatch, chunk_suffix);
    case ActionKind::send_activation:
      return fmt::format("send_act mb{}{} -> s{}", microbatch, chunk_suffix, peer);
    case ActionKind::recv_activation:
      return fmt::format("recv_act mb{}{} <- s{}", microbatch, chunk_suffix, peer);
    case ActionKind::send_grad:
      return fmt::format("send_grad mb{}{} -> s{}", microbatch, chunk_suffix, peer);
    case ActionKind::recv_grad:
      return fmt::format("recv_grad mb{}{} <- s{}", microbatch, chunk_suffix, peer);
  }
  return "?";
}

Action forward(int microbatch, int chunk) {
  return {ActionKind::forward, microbatch, chunk, -1};
}
Action backward(int microbatch, int chunk) {
  return {ActionKind::backward, microbatch, chunk, -1};
}
Action backward_input(int microbatch, int chunk) {
  return {ActionKind::backward_input, microbatch, chunk, -1};
}
Action backward_weight(int microbatch, int chunk) {
  return {ActionKind::backward_weight, microbatch, chunk, -1};
}

bool Schedule::splits_backward() const {
  for (const std::vector<Action>& stage : actions)
    for (const Action& a : stage)
      if (a.kind == ActionKind::backward_input) return true;
  return false;
}

std::vector<Action> Schedule::compute_actions(int stage) const {
  std::vector<Action> out;
  for (const Action& a : actions.at(stage))
    if (is_compute(a.kind)) out.push_back(a);
  return out;
}

int virtual_stage(Placement placement, int stages, int stage, int chunk) {
  if (placement == Placement::v_shape) return chunk == 0 ? stage : 2 * stages - 1 - stage;
  if (placement == Placement::bidirectional) return chunk == 0 ? stage : stages - 1 - stage;
  return chunk * stages + stage;
}

int model_parts(Placement placement, int stages, int chunks) {
  return placement == Placement::bidirectional ? stages : stages * chunks;
}

std::pair<int, int> Schedule::neighbour(int stage, int chunk, int step) const {
  if (placement == Placement::bidirectional)
    return {chunk == 0 ? stage + step : stage - step, chunk};
  const int v = virtual_stage(stage, chunk) + step;
  return {stage_of(v), chunk_of(v)};
}

int Schedule::stage_of(int v) const {
  if (placement == Placement::v_shape) return v < stages ? v : 2 * stages - 1 - v;
  if (placement == Placement::bidirectional) return v;
  return v % stages;
}

int Schedule::chunk_of(int v) const {
  if (placement == Placement::bidirectional) return 0;
  return v / stages;  // ring and V: the first P virtual stages are chunk 0
}

}  // namespace mgpu::pipeline
