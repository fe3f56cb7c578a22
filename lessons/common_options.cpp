// The options every lesson shares (lesson.h's CommonOptions), by group: World, Model (with the
// mixture-of-experts ones), Training and Output, each checked by lessons/validate.h's validators.
#include <string>

#include "core/model/gpt.h"
#include "core/runtime/input_file.h"
#include "lessons/lesson.h"
#include "lessons/validate.h"

namespace mgpu::lessons {

namespace {

void add_world_options(CLI::App& app, CommonOptions& c) {
  app.add_option("--ranks,-n", c.ranks, "number of ranks (virtual GPUs on cpu)")
      ->check(InRange(1, 64, "ranks"))
      ->group("World");
  app.add_option("--device", c.device, "cpu | cuda | phantom (shapes only, no math)")
      ->check(CLI::IsMember({"cpu", "cuda", "phantom"}))
      ->group("World");
  app.add_option("--clock", c.clock, "modeled | wall | cuda (default: modeled on cpu/phantom)")
      ->check(CLI::IsMember({"", "modeled", "wall", "cuda"}))
      ->group("World");
  app.add_option("--profile", c.profile, "hardware profile preset or JSON file (`mgpu profiles`)")
      ->group("World");
  app.add_option("--capacity", c.capacity,
                 "per-rank memory capacity, e.g. 2GiB (default: profile's)")
      ->check(SizeAtLeast(1024, "1KiB"))
      ->group("World");
  // Below 0.1 s a busy host's ordinary waits would be reported as stuck.
  app.add_option("--comm-timeout", c.comm_timeout, "seconds before a stuck wait is reported")
      ->check(InRange(0.1, 86400, "s"))
      ->group("World");
  app.add_option("--impl", c.impl,
                 "exercise implementations: reference | mine | ex01=mine,ex03=mine,...")
      ->group("World");
}

// Switch Transformer's capacity factor: a finite number > 0, or "dropless" (no token dropped).
const CLI::Validator CapacityFactor(
    [](std::string& text) -> std::string {
      if (text == "dropless") return "";
      std::string number = text;
      std::string error = Positive(number);
      if (error.empty()) error = AtMost(GPTConfig::kMaxCapacityFactor)(number);
      return error.empty() ? ""
                           : error +
                                 " (or dropless; a factor of experts / top_k already keeps "
                                 "every token)";
    },
    "NUMBER|dropless");

// The mixture-of-experts options (core/model/moe.h); 0 experts is the dense model.
void add_expert_options(CLI::App& app, CommonOptions& c) {
  app.add_option("--experts", c.experts, "experts per MoE block (0: the dense model)")
      ->check(NonNegative)
      ->group("Model");
  app.add_option("--top-k", c.top_k, "experts each token is sent to")
      ->check(AtLeastOne("expert"))
      ->group("Model");
  app.add_option("--moe-every", c.moe_every, "every N-th block is an MoE block (1: all)")
      ->check(AtLeastOne("block"))
      ->group("Model");
  app.add_option("--capacity-factor", c.capacity_factor,
                 "tokens an expert keeps per sequence, as a multiple of its even share "
                 "(e.g. 1.25), or dropless (the default)")
      ->check(CapacityFactor)
      ->group("Model");
  app.add_option("--aux-loss-coef", c.aux_loss_coef, "weight of the load-balancing loss")
      ->check(NonNegative)
      ->group("Model");
}

void add_model_options(CLI::App& app, CommonOptions& c) {
  app.add_option("--layers", c.layers, "transformer blocks")
      ->check(AtLeastOne("block"))
      ->group("Model");
  app.add_option("--dim", c.dim, "model width")->check(AtLeastOne("element"))->group("Model");
  app.add_option("--heads", c.heads, "attention heads (must divide --dim)")
      ->check(AtLeastOne("head"))
      ->group("Model");
  app.add_option("--seq", c.seq, "sequence length")->check(AtLeastOne("token"))->group("Model");
  app.add_option("--model", c.model,
                 "tiny | tiny-moe | llama-tiny | gpt2-small | gpt2-medium | gpt2-large | gpt2-xl | "
                 "gpt3-2.7b | gpt3-6.7b | llama3-8b | gpt3-13b | mixtral-8x7b | llama3-70b | "
                 "gpt3-175b | llama3-405b, or a JSON file {layers, dim, heads, vocab, seq, "
                 "tie_embeddings, experts, top_k, norm, mlp, kv_heads, ...}; --layers etc. "
                 "override it")
      ->group("Model");
  app.add_option("--kv-heads", c.style.kv_heads,
                 "key/value heads the query heads share (grouped-query attention; must divide "
                 "--heads; default: one per head)")
      ->check(AtLeastOne("kv head"))
      ->group("Model");
  app.add_option("--ffn-dim", c.style.ffn_dim,
                 "the MLP's hidden width (default: the model's; 4 x --dim for GPT-2's block)")
      ->check(AtLeastOne("hidden unit"))
      ->group("Model");
  app.add_option("--vocab", c.vocab, "vocabulary size (default: what the task needs)")
      ->check(AtLeastOne("token id"))
      ->group("Model");
  app.add_option("--tie-embeddings", c.tie_embeddings,
                 "on | off: the output head reads the token embedding (default: on for the GPT-2 "
                 "and GPT-3 presets, off for the tiny model)")
      ->check(CLI::IsMember({"on", "off"}))
      ->group("Model");
  add_expert_options(app, c);
}

// The training options, then --log-every (shown under Output).
void add_training_options(CLI::App& app, CommonOptions& c) {
  const CLI::Validator& positive = Positive;  // finite and > 0 (lessons/validate.h)
  app.add_option("--steps", c.steps, "training steps")
      ->check(AtLeastOne("step"))
      ->group("Training");
  app.add_option("--batch", c.batch, "global batch (sequences per step)")
      ->check(AtLeastOne("sequence"))
      ->group("Training");
  app.add_option("--task", c.task, "markov | reverse | modadd | text (with --data)")
      ->group("Training");
  app.add_option("--data", c.data_file, "a text file to train on, byte-level (implies --task text)")
      ->check(InputFile(kMaxDataFileBytes))
      ->group("Training");
  app.add_option("--optimizer", c.optimizer, "adamw | sgd")
      ->check(CLI::IsMember({"adamw", "sgd"}))
      ->group("Training");
  app.add_option("--lr", c.lr, "learning rate")
      ->check(positive)
      ->check(FloatRange)
      ->group("Training");
  app.add_option("--weight-decay", c.weight_decay,
                 "AdamW's decoupled weight decay (PyTorch's default 0.01); SGD: L2 on the gradient")
      ->check(NonNegative)
      ->check(FloatRange)
      ->group("Training");
  app.add_option("--seed", c.seed, "seed for init and data")->check(Unsigned)->group("Training");
  app.add_option("--checkpoint", c.checkpoint, "save parameters + optimizer state here at the end")
      ->check(OutputFile)
      ->group("Training");
  app.add_option("--resume", c.resume, "start from this checkpoint")
      ->check(InputFile(kMaxCheckpointBytes))
      ->group("Training");
  app.add_option("--precision", c.precision,
                 "fp32 | bf16 | fp16: weights and activations (bf16/fp16 keep fp32 master weights)")
      ->check(CLI::IsMember({"fp32", "bf16", "fp16"}))
      ->group("Training");
  app.add_option("--recompute", c.recompute,
                 "none | selective | full: activations recomputed in backward instead of kept")
      ->check(CLI::IsMember({"none", "selective", "full"}))
      ->group("Training");
  app.add_option("--checkpoint-every", c.checkpoint_every,
                 "also write --checkpoint every N steps (the last one a lost rank resumes from)")
      ->check(NonNegative)
      ->group("Training");
  app.add_option("--log-every", c.log_every, "print the loss every K steps (0 = ~10 lines)")
      ->check(NonNegative)
      ->group("Output");
}

// Injected faults (core/runtime/faults.h), checked by CommonOptions::fault_plan.
void add_fault_options(CLI::App& app, CommonOptions& c) {
  app.add_option("--slow-rank", c.slow_rank,
                 "R:F or R:F@S: rank R computes F times slower (from step S); repeatable")
      ->group("Faults");
  app.add_option("--slow-link", c.slow_link,
                 "A-B:F: the link between ranks A and B carries 1/F of its bandwidth; repeatable")
      ->group("Faults");
  app.add_option("--jitter", c.jitter, "P: compute time jitters by +-P% (seeded by --seed)")
      ->group("Faults");
  app.add_option("--fail-rank", c.fail_rank, "R@S: rank R dies as step S begins")->group("Faults");
}

void add_output_options(CLI::App& app, CommonOptions& c) {
  app.add_option("--trace", c.trace_path, "write the Chrome/Perfetto trace JSON here")
      ->check(OutputFile)
      ->group("Output");
  app.add_flag("--viz", c.viz, "open the dashboard on the trace when done")->group("Output");
  app.add_flag("--quiet,-q", c.quiet, "print only the summary")->group("Output");
}

}  // namespace

void add_common_options(CLI::App& app, CommonOptions& c, const LessonDefaults& d) {
  c.ranks = d.ranks;
  c.steps = d.steps;
  c.batch = d.batch;
  c.layers = d.layers;
  add_world_options(app, c);
  if (d.model_options) {
    add_model_options(app, c);
    add_training_options(app, c);
    add_fault_options(app, c);
  }
  add_output_options(app, c);
}

}  // namespace mgpu::lessons
