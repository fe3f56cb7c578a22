// The host-memory pre-check of the cpu device. Its virtual GPUs allocate real host memory, all
// ranks of the process together, so before a lesson allocates anything large it adds up what the
// run will hold by category (training state from exercise 05's reference estimator, activations
// from core/memory/activations.h, the sampled batches, collective buffers) and refuses, with that
// breakdown and what would fit, a run the host cannot hold: one line and exit 2 instead of the
// kernel's OOM killer half a minute later. CUDA runs are not checked; phantom runs allocate
// shapes only, so only their sampled batches (real host memory) are.
#pragma once
#include <cstdint>
#include <string>

#include "core/model/gpt.h"
#include "lessons/lesson.h"

namespace mgpu::lessons {

// Bytes the whole process holds at once, by allocator category, plus `data`: the sampled token
// batches, which live outside the allocator.
struct HostFootprint {
  int64_t parameters = 0, gradients = 0, optimizer_state = 0, activations = 0, workspace = 0,
          comm_buffers = 0, data = 0;
  int64_t total() const;
  // "parameters 431.00 KiB + gradients 431.00 KiB + ... = 8.08 MiB" (categories that are not 0).
  std::string breakdown() const;
};

// One training step of `cfg` on a global batch of `batch` sequences, `local_ranks` ranks in this
// process. Training state is counted `state_copies` times: every layout holds at least one full
// copy; replicating layouts (DDP) hold one per rank. Activations are the global batch's on one
// device: every rank's share of it under data parallelism; layouts that keep fewer micro-batches
// at once (1F1B, accumulation) hold less. Every rank samples the global batch (tokens and
// targets, 4 B each).
HostFootprint training_footprint(const GPTConfig& cfg, const std::string& optimizer, int64_t batch,
                                 int local_ranks, int state_copies = 1);

// Throws UsageError (one line with the breakdown and the largest --batch or --layers that fits)
// when a cpu run of the training lesson `c` over `cfg` does not fit `available` bytes
// (MemAvailable; -1 = unknown: no check). On the phantom device only the data is counted.
// model_config calls it for every training lesson with one copy of the training state; a lesson
// whose ranks each replicate the model calls it again with `state_copies` = its ranks here.
void check_training_fits_host(const CommonOptions& c, const GPTConfig& cfg, int64_t available,
                              int state_copies = 1);
void check_training_fits_host(const CommonOptions& c, const GPTConfig& cfg);  // this host
// Every rank of this process holds a full replica of the model and its optimizer (DDP).
void check_replicas_fit_host(const CommonOptions& c, const GPTConfig& cfg);

// The collectives lesson: every rank holds a buffer of up to `max_bytes` and the other end of a
// gather or scatter, and the local backend stages one chunk per late receiver.
void check_collectives_fit_host(const CommonOptions& c, int64_t max_bytes, int64_t available);
void check_collectives_fit_host(const CommonOptions& c, int64_t max_bytes);  // this host

}  // namespace mgpu::lessons
