// `mgpu plan`: which layout should this model use on N GPUs of this cluster? The search lives in
// core/plan/search.h; this is the command around it and the report the recommendations lesson
// prints too.
#pragma once
#include <iosfwd>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/plan/search.h"
#include "lessons/lesson.h"

namespace mgpu::lessons {

// The model a plan is for: a preset name or a JSON file, with the preset's default global batch
// (GPT-3 presets 1536, as in the GPT-3 paper; otherwise 512). Throws UsageError.
struct PlanModel {
  std::string name;
  GPTConfig config;
  int default_global_batch = 512;
};
PlanModel plan_model(const std::string& name_or_file);

// Bytes as the planner prints them: "12.3 GiB".
std::string gib(int64_t bytes);

// Runs the search, printing one progress line per simulation to `progress`.
plan::SearchResult run_search(const plan::SearchRequest& request, std::ostream& progress);

// The report: the top K table, then (full) the slower and rejected layouts with why and what the
// engine refused, then the counts.
enum class PlanDetail { full, brief };
void print_plan(std::ostream& out, const plan::SearchRequest& request,
                const plan::SearchResult& result, const std::string& model_name,
                PlanDetail detail = PlanDetail::full);
// The same as JSON: every ranked layout with its figures and memory by category, the rejected
// ones with why, and the counts.
nlohmann::json plan_json(const plan::SearchRequest& request, const plan::SearchResult& result,
                         const std::string& model_name);

int cmd_plan(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

// Lesson 17: the planner on four cases, and the rules its numbers show.
std::unique_ptr<Lesson> make_recommendations_lesson();

}  // namespace mgpu::lessons
