// The classroom's figures from the native build: `web_figures [--set NAME=V,...] [--versus A,B]`
// prints what the web page prints for the same settings (web/figures.h), so the browser test can
// compare the two exactly. Exit 2 with the --set or --versus error line on a bad setting or a
// refused combination.
#include <iostream>
#include <string>

#include "lessons/classroom.h"
#include "viz/dashboard.h"
#include "web/figures.h"

int main(int argc, char** argv) {
  std::string settings, versus;
  for (int i = 1; i < argc; i += 2) {
    const std::string flag = argv[i];
    if (i + 1 < argc && flag == "--set") {
      settings = argv[i + 1];
    } else if (i + 1 < argc && flag == "--versus") {
      versus = argv[i + 1];
    } else {
      std::cerr << "usage: web_figures [--set name=value,...] [--versus schedule,schedule]\n";
      return 2;
    }
  }
  mgpu::viz::DashboardOptions opt;
  opt.labels = {"pipeline"};
  opt.rerun =
      mgpu::viz::RerunHook{mgpu::lessons::classroom_rerun, mgpu::lessons::classroom_parameters()};
  auto error = mgpu::lessons::apply_settings(opt.rerun->params, settings);
  if (!error && !versus.empty()) {
    error = mgpu::lessons::parse_versus(opt.rerun->params, versus, opt.rerun->split_values);
    opt.rerun->split_by = "schedule";
    opt.labels.clear();
  }
  if (error) {
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
