// The message a call throws, or "" when it does not: for tests that check error texts.
#pragma once
#include <exception>
#include <string>

namespace mgpu::testing {

inline std::string error_of(auto&& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

}  // namespace mgpu::testing
