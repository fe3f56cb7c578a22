// The recommendations lesson's class, shared by its two halves: recommendations.cpp (its
// options, run() and the planner search each question is) and recommendations_cases.cpp (the four
// questions, each a search and the rule read off what it printed).
#pragma once
#include <functional>
#include <iosfwd>
#include <string>

#include <CLI/CLI.hpp>

#include "core/plan/search.h"
#include "core/runtime/profile.h"
#include "lessons/lesson.h"

namespace mgpu::lessons::detail {

struct Case {
  std::string title, model;
  int gpus;
  std::function<void(plan::SearchRequest&)> adjust = [](plan::SearchRequest&) {};
};

class RecommendationsLesson : public Lesson {
 public:
  std::string name() const override;
  std::string summary() const override;
  LessonDefaults defaults() const override;
  void add_options(CLI::App& app) override;
  int run(const CommonOptions& c, std::ostream& out) override;

 private:
  plan::SearchResult search(const Case& k, const HardwareProfile& profile, std::ostream& out,
                            plan::SearchRequest& request);
  // The four questions (recommendations_cases.cpp).
  void small_model(const HardwareProfile& profile, std::ostream& out);
  void large_model(const HardwareProfile& profile, std::ostream& out);
  void long_sequences(const HardwareProfile& profile, std::ostream& out);
  void optimizer_memory(const HardwareProfile& profile, std::ostream& out);

  int max_simulated_ = 6;
  std::string extra_flags_;
  CLI::Option* profile_option_ = nullptr;
  bool quiet_ = false;  // --quiet: only the rules, not the tables
};

}  // namespace mgpu::lessons::detail
