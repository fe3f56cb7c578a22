// The classroom's figures from the native build: `web_figures [--set NAME=V,...]` prints what the
// web page prints for the same settings (web/figures.h), so the browser test can compare the two
// exactly. Exit 2 with the --set error line on a bad setting or a refused combination.
#include <iostream>
#include <string>

#include "lessons/classroom.h"
#include "viz/dashboard.h"
#include "web/figures.h"

int main(int argc, char** argv) {
  std::string settings;
  if (argc == 3 && std::string(argv[1]) == "--set")
    settings = argv[2];
  else if (argc != 1) {
    std::cerr << "usage: web_figures [--set name=value,...]\n";
    return 2;
  }
  mgpu::viz::DashboardOptions opt;
  opt.labels = {"pipeline"};
  opt.rerun =
      mgpu::viz::RerunHook{mgpu::lessons::classroom_rerun, mgpu::lessons::classroom_parameters()};
  if (auto error = mgpu::lessons::apply_settings(opt.rerun->params, settings)) {
    std::cerr << *error << "\n";
    return 2;
  }
  const mgpu::viz::Dashboard dashboard(std::move(opt));
  if (!dashboard.rerun_error().empty()) {
    std::cerr << dashboard.rerun_error() << "\n";
    return 2;
  }
  std::cout << mgpu::web::classroom_figures(dashboard.views());
  return 0;
}
