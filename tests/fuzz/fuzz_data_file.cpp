// Fuzz target: `--data FILE`, byte-level text. Any bytes are a task or std::invalid_argument (too
// short for the sequence); a task's batches hold only byte tokens (0..255) taken from the input.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <stdexcept>
#include <string>

#include "core/data/task.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  constexpr int kSeq = 8;
  try {
    const mgpu::data::TextTask task(1, "fuzz", bytes, kSeq);
    const mgpu::data::Batch batch = task.sample(0, 2, kSeq);
    for (const int32_t token : batch.tokens)
      if (token < 0 || token > 255 || bytes.find(static_cast<char>(token)) == std::string::npos)
        std::abort();  // a token that is not one of the file's bytes
  } catch (const std::invalid_argument&) {
  }
  return 0;
}
