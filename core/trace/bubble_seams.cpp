// Storage for the bubble accounting seam (see bubble_seams.h).
#include "core/trace/bubble_seams.h"

#include "core/runtime/seam.h"

namespace mgpu::trace {

void install_bubble_seams(BubbleSeams seams) {
  Seam<BubbleSeams>::install(std::move(seams));
}

const BubbleSeams& bubble_seams() {
  return Seam<BubbleSeams>::get("bubble accounting seam",
                                Required{"bubble_accounting", &BubbleSeams::bubble_accounting});
}

}  // namespace mgpu::trace
