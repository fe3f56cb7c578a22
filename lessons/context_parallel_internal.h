// The context-parallel lesson's report (context_parallel_report.cpp), which its run()
// (context_parallel.cpp) prints: balance, bytes on the wire, activation memory, exact vs naive.
#pragma once
#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

#include "core/model/gpt.h"
#include "core/parallel/context_parallel.h"
#include "core/runtime/trace_event.h"
#include "lessons/lesson.h"

namespace mgpu::lessons::detail {

void print_balance(std::ostream& out, const trace::Trace& trace);
void print_wire(std::ostream& out, const CommonOptions& c, const GPTConfig& cfg,
                parallel::CpLayout layout, const trace::Trace& trace);
// Activation bytes this model keeps per GPU (fp32, --recompute none), by formula.
int64_t activation_formula(const GPTConfig& cfg, int64_t b, int64_t t, int cp,
                           parallel::CpLayout layout);
void print_memory_vs_seq(std::ostream& out, const CommonOptions& c, parallel::CpLayout layout,
                         const std::string& layout_name);
void print_exactness(std::ostream& out, const CommonOptions& c, parallel::CpLayout layout,
                     const std::vector<float>& losses);

}  // namespace mgpu::lessons::detail
