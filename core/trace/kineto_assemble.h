// Internal to the Kineto reader: the parsed files become one KinetoTrace (ranks numbered, CPU-only
// traces mapped, steps extended over the GPU work they launched, clocks aligned, seconds).
#pragma once
#include <vector>

#include "core/trace/kineto_raw.h"
#include "core/trace/kineto_reader.h"

namespace mgpu::trace::kineto {

KinetoTrace assemble(std::vector<RawRank> files, const KinetoOptions& options);

}  // namespace mgpu::trace::kineto
