// The classroom's figures as text: what the page prints after every run and what
// `web_figures --set ...` prints natively, so a test can hold the browser to the native numbers.
#pragma once
#include <string>
#include <vector>

#include "viz/view_model.h"

namespace mgpu::web {

// One block per view: its run line, its measured-vs-theory line, and one line per rank (busy,
// communication, idle in microseconds; bubble and overlap in percent; bytes sent; peak memory).
std::string classroom_figures(const std::vector<viz::TraceView>& views);

}  // namespace mgpu::web
