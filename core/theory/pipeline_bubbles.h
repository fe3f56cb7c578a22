// Closed-form pipeline bubbles: the idle time of EVERY stage in one step (all stages do the same
// work, so each one idles step - busy). One function per formula; the lesson prints them and the
// tests hold the simulator and the executor's theory mode to them.
//
// Notation of DualPipe's README (github.com/deepseek-ai/DualPipe, "Pipeline bubbles and memory
// usage comparison"): PP pipeline stages (model chunks in the pipe), F = forward of one chunk,
// B = FULL backward of one chunk (input and weight gradient), W = its weight-gradient part,
// F&B = a forward and a backward of two micro-batches issued together. Per micro-batch:
//   schedule   bubble                 parameters  activations (chunks held at the peak)
//   1F1B       (PP-1)(F+B)            1x          PP
//   ZB1P       (PP-1)(F+B-2W)         1x          PP
//   DualPipe   (PP/2-1)(F&B+B-3W)     2x          PP+1
// ZB1P is ZB-H1 (Qi et al., "Zero Bubble Pipeline Parallelism", ICLR 2024): its B is our
// backward_input + W. DualPipeV is DualPipe cut in half: PP = 2 x devices chunks in a V, one
// parameter copy per chunk, the same bubble formula with PP/2 = devices.
// Here a stage has ONE compute stream, so F&B = F + B (DualPipe overlaps the pair's
// communication, not its arithmetic) and the pair waits for both of its inputs first.
//
// ZB-V (Qi et al., arXiv:2401.10241 section 6) with equal F, B-input and W per chunk: within one
// step the only idle time left is the ramp of the V's tip, stage P-1, which cannot start before
// the P-1 chunk forwards above it: bubble = (P-1) F per stage (the paper's "zero bubble" also
// overlaps consecutive steps, which a step measured from a barrier does not).
#pragma once
#include <string>

namespace mgpu::theory {

struct ChunkCosts {
  double F = 1, B = 2, W = 1;  // B is the full backward; B - W is zero-bubble's input part
  double FandB() const { return F + B; }  // one compute stream: no overlap of arithmetic
};

// PP = stages of the pipe (= devices for 1F1B and ZB1P, one chunk each).
inline double bubble_1f1b(int pp, ChunkCosts c) {
  return (pp - 1) * (c.F + c.B);
}
inline double bubble_zb1p(int pp, ChunkCosts c) {
  return (pp - 1) * (c.F + c.B - 2 * c.W);
}
// PP = chunks in the pipe: 2 x devices for DualPipeV, devices for DualPipe.
inline double bubble_dualpipe(int pp, ChunkCosts c) {
  return (pp / 2 - 1) * (c.FandB() + c.B - 3 * c.W);
}
// devices = P stages, each holding two chunks in a V.
inline double bubble_zbv(int devices, ChunkCosts c) {
  return (devices - 1) * c.F;
}

// Peak activations per device, in chunks held, from the same table.
inline int peak_chunks_1f1b(int pp) {
  return pp;
}
inline int peak_chunks_dualpipe(int pp) {
  return pp + 1;
}

// The planner's screen (core/plan/search.cpp): the bubble in micro-batch times of a stage
// (F + B each), (P-1) for gpipe and 1f1b, (P-1)/V interleaved (Narayanan et al., "Efficient
// Large-Scale Language Model Training on GPU Clusters Using Megatron-LM", SC 2021, section 2.2),
// and the zero-bubble family's closed forms above at F = W = B/2 (DualPipe's PP = pp, whole
// stages).
double bubble_in_microbatches(const std::string& schedule, int pp, int virtual_stages);

// Micro-batches whose activations a stage holds at once: all M in gpipe, pp in 1f1b (the same
// paper), pp + (pp-1)/V chunks' worth in interleaved, up to 2pp - 1 in zb-h1 (its deferred weight
// passes keep what W needs: an upper bound), and the V schedules' PP (ZB-V) or PP+1 (DualPipeV)
// half-stage chunks from DualPipe's table; DualPipe's PP+1 whole-stage chunks (of its two copies).
double microbatches_in_flight(const std::string& schedule, int pp, int virtual_stages,
                              int microbatches);

// Whether `pp` stages may hold `layers` (pipeline::partition_layers: the first layers % pp stages
// one layer more): when pp divides them, or when the fullest stage holds at most
// kMaxStageImbalance more than the mean, so the step (paced by the fullest stage) is within that
// of an even split. Llama 3 405B trained its 126 layers on 16 stages of 8 and 7 (Dubey et al.,
// "The Llama 3 Herd of Models", 2024, section 3.3.2): 1.6% over the mean 7.875. Every GPT-2 and
// GPT-3 depth (at most 96 layers) splits evenly or not at all under this bound.
constexpr double kMaxStageImbalance = 0.02;
bool pipeline_stages_fit(int layers, int pp);

}  // namespace mgpu::theory
