// Exercise 09: the dispatch of a mixture-of-experts layer. Replace the body with your
// implementation (see docs/exercises/09-moe-dispatch.md).
#include "exercises/exercises.h"

namespace mgpu::mine {

Routing route_tokens(const RouteQuery& query) {
  (void)query;
  throw ex::NotImplemented("not implemented yet: see docs/exercises/09-moe-dispatch.md");
}

}  // namespace mgpu::mine
