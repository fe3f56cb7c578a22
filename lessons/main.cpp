#include <iostream>

#include "lessons/cli.h"

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  return mgpu::lessons::mgpu_main(args, std::cout, std::cerr);
}
