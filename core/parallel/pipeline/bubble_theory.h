// The closed-form pipeline bubbles moved to core/theory/pipeline_bubbles.h (one place for every
// formula); this header keeps their pipeline:: names for the schedule code and its tests.
#pragma once
#include "core/theory/pipeline_bubbles.h"

namespace mgpu::pipeline {
using theory::bubble_1f1b;
using theory::bubble_dualpipe;
using theory::bubble_zb1p;
using theory::bubble_zbv;
using theory::ChunkCosts;
using theory::peak_chunks_1f1b;
using theory::peak_chunks_dualpipe;
}  // namespace mgpu::pipeline
