// Pipeline schedules are data. A schedule is, for every stage, the ordered list of actions that
// stage runs: compute (forward / backward / zero-bubble's split backward_input + backward_weight of
// one micro-batch on one model chunk) and the point-to-point messages around it (activations flow
// to the next stage, gradients flow back). Generators here are pure functions; an executor runs any
// schedule, the validator checks one, and the simulator times one before anything runs.
#pragma once
#include <compare>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace mgpu::pipeline {

enum class ActionKind {
  forward,
  backward,         // full backward: input grad and weight grad together
  backward_input,   // zero-bubble "B": grad w.r.t. the stage input (on the critical path)
  backward_weight,  // zero-bubble "W": grad w.r.t. the weights (can wait to fill a bubble)
  send_activation,
  recv_activation,
  send_grad,
  recv_grad,
};

const char* kind_name(ActionKind kind);  // "forward", "recv_grad", ...
bool is_compute(ActionKind kind);
bool is_communication(ActionKind kind);

// Where a stage's chunks sit in the model. ring: chunk c of stage s is virtual stage c*P + s
// (Megatron's interleaving: activations go round the ring of stages V times). v_shape: two
// chunks, stage s holds virtual stages s and 2P-1-s (ZB-V, DualPipeV): activations go down the
// stages and come back up, so stage 0 holds the first and the last layers and the turn at stage
// P-1 stays on one device. bidirectional (DualPipe): the model in P parts, two copies; chunk 0 of
// stage s is part s of the "down" copy (micro-batches enter at stage 0), chunk 1 is part P-1-s of
// the "up" copy (they enter at stage P-1), so each direction's next part is on the neighbouring
// stage in its own direction, in the same chunk.
enum class Placement { ring, v_shape, bidirectional };
int virtual_stage(Placement placement, int stages, int stage, int chunk);
// How many parts the model is cut into: stages x chunks, except the bidirectional placement's P.
int model_parts(Placement placement, int stages, int chunks);

struct Action {
  ActionKind kind;
  int microbatch = 0;
  int chunk = 0;  // model chunk on this stage; 0 unless the schedule is interleaved
  int peer = -1;  // the other stage of a send/recv; -1 for compute
  // DualPipe's "F&B": this compute is issued together with the next one, so both of their
  // messages are received before the first starts and both results are sent after the second.
  bool with_next = false;
  // "F3", "B3", "W2", "F3c1" (chunk shown when > 0), "send_act mb3 -> s2", "recv_grad mb1 <- s3".
  std::string str() const;
  bool operator==(const Action&) const = default;
};

// Builders that read like the schedule diagrams.
Action forward(int microbatch, int chunk = 0);
Action backward(int microbatch, int chunk = 0);
Action backward_input(int microbatch, int chunk = 0);
Action backward_weight(int microbatch, int chunk = 0);

struct Schedule {
  std::string name;
  int stages = 1;
  int microbatches = 1;
  int virtual_stages = 1;  // model chunks per stage
  // actions[stage] in execution order; which virtual stage chunk c of a stage holds: placement.
  std::vector<std::vector<Action>> actions;
  Placement placement = Placement::ring;

  int virtual_stage(int stage, int chunk) const {
    return pipeline::virtual_stage(placement, stages, stage, chunk);
  }
  int stage_of(int virtual_stage) const;  // the stage holding a virtual stage (chunk 0's copy)
  int chunk_of(int virtual_stage) const;  // and which of its chunks it is
  int num_virtual_stages() const { return model_parts(placement, stages, virtual_stages); }
  // Where the data of chunk `chunk` on `stage` goes next (step +1, the forward's direction) or
  // came from (step -1): the stage and chunk holding the neighbouring virtual stage.
  std::pair<int, int> neighbour(int stage, int chunk, int step) const;
  // Whether micro-batch mb passes through chunk `chunk` (bidirectional: one direction's half).
  bool carries(int chunk, int microbatch) const {
    return placement != Placement::bidirectional || (microbatch < microbatches / 2) == (chunk == 0);
  }
  // Compute actions only, in order ("F0 F1 B0 ..." without the messages).
  std::vector<Action> compute_actions(int stage) const;
  // Whether any backward is split into zero-bubble's B and W (an MoE block cannot be).
  bool splits_backward() const;
};

// The generators. Each returns a schedule with its send/recv actions already inserted: a recv just
// before the compute that needs it, a send just after the compute that produced it. With buffered
// sends (send never blocks, recv blocks) that placement cannot deadlock as long as the compute
// order respects the data dependencies, which is what every generator here guarantees.
// GPipe's and 1F1B's compute order is exercise 03: it comes from `seams` (seams.h).
struct PipelineSeams;
Schedule gpipe_schedule(int stages, int microbatches, const PipelineSeams& seams);
Schedule one_f_one_b_schedule(int stages, int microbatches, const PipelineSeams& seams);
Schedule interleaved_1f1b_schedule(int stages, int microbatches, int virtual_stages);
// Interleaved 1F1B takes micro-batches in rounds: floor(M / P) rounds (one when M < P) of sizes
// as equal as possible, larger first; each round is at least P, so M need not be a multiple of P.
std::vector<int> interleaved_round_sizes(int stages, int microbatches);
Schedule zb_h1_schedule(int stages, int microbatches);
Schedule naive_model_parallel_schedule(int stages);
// V-shaped schedules (schedule_v.cpp): two chunks per stage, Placement::v_shape.
Schedule zbv_schedule(int stages, int microbatches);
Schedule dualpipev_schedule(int stages, int microbatches);
// Bidirectional DualPipe (schedule_dualpipe.cpp): Placement::bidirectional, micro-batches
// 0..M/2-1 go down (chunk 0), M/2..M-1 go up (chunk 1); even stages, even M >= 2P.
Schedule dualpipe_schedule(int stages, int microbatches);
// The fewest micro-batches each V schedule's warmup needs, and the most any schedule accepts
// (a schedule is a list of every action: a million micro-batches would be gigabytes of actions).
int min_microbatches(const std::string& schedule_name, int stages);
constexpr int max_microbatches = 65536;

// Names accepted by make_schedule / validate_pipeline_config.
const std::vector<std::string>&
schedule_names();  // naive, gpipe, 1f1b, interleaved, zb-h1, zbv, dualpipev, dualpipe
Schedule make_schedule(const std::string& name, int stages, int microbatches, int virtual_stages,
                       const PipelineSeams& seams);

// Adds the send/recv actions to per-stage compute lists (used by all generators; public so a
// student's compute order can be turned into a full schedule).
Schedule with_communication(std::string name, int stages, int microbatches, int virtual_stages,
                            std::vector<std::vector<Action>> compute,
                            Placement placement = Placement::ring);

// One point-to-point message. A send and the recv that consumes it have the same key.
struct MessageKey {
  bool is_grad;
  int microbatch;
  int from_stage;
  int to_stage;
  int to_virtual_stage;  // the virtual stage that consumes the message
  auto operator<=>(const MessageKey&) const = default;
};
std::optional<MessageKey> message_key(const Schedule& schedule, int stage, const Action& action);

// Throws std::invalid_argument with one line saying what is wrong and what would work.
void validate_pipeline_config(const std::string& schedule_name, int stages, int microbatches,
                              int virtual_stages, int layers);

struct LayerPartition {
  std::vector<std::pair<int, int>> ranges;  // [begin, end) per part
  bool uneven = false;
  std::string description;  // "stages have 3,3,2 layers (uneven)" or "stages have 2,2 layers"
};
// Balanced split of `layers` into `parts`; the first parts get the extra layer.
LayerPartition partition_layers(int layers, int parts);

}  // namespace mgpu::pipeline
