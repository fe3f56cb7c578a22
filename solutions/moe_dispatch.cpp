// Exercise 09, the reference: top-k routing with capacity, the dispatch order and the send
// counts of a mixture-of-experts layer (the contract in core/model/moe.h).
#include "exercises/exercises.h"

namespace mgpu::reference {

Routing route_tokens(const RouteQuery& query) {
  (void)query;
  throw std::logic_error("the reference routing is not written yet");
}

}  // namespace mgpu::reference
