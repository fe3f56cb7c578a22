// Activation bytes per block and per step by recompute mode (Korthikanti et al., "Reducing
// Activation Recomputation in Large Transformer Models", 2022, section 4, adapted to this GPT's
// kept tensors): the formulas live in core/memory/activations.h beside the allocator categories
// they predict; this header lists them with the other closed forms of core/theory.
#pragma once
#include "core/memory/activations.h"

namespace mgpu::theory {
using memory::block_kept_bytes;
using memory::step_activation_bytes;
using memory::StepActivationBytes;
}  // namespace mgpu::theory
