// What the planner's search files share (search.cpp, enumerate.cpp, rank.cpp): one home for each
// helper more than one of them uses.
#pragma once
#include <string>
#include <vector>

#include "core/plan/search.h"

namespace mgpu::plan::detail {

// ZB-V and DualPipeV: two model chunks per stage in a V (enumerate.cpp).
bool is_v_schedule(const std::string& schedule);

// Ranks what fits by tokens/s and says why each one is slower than the best; what does not fit
// is rejected with its excess (rank.cpp).
void rank_simulated(std::vector<Simulated>& simulated, const HardwareProfile& profile,
                    SearchResult& result);

}  // namespace mgpu::plan::detail
