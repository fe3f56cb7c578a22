#include "exercises/selection.h"

#include <iostream>
#include <map>
#include <sstream>
#include <stdexcept>

#include <fmt/format.h>
#include <fmt/ostream.h>

#include "exercises/exercises.h"

namespace mgpu::ex {

namespace {

std::string g_selected;
std::vector<ExerciseChoice> g_installed;

SeamTables& seams_slot() {
  static SeamTables tables = reference::seams();
  return tables;
}

std::string valid_names(const std::vector<Exercise>& table) {
  std::string names;
  for (const Exercise& e : table) names += (names.empty() ? "" : ", ") + e.name;
  return names;
}

[[noreturn]] void bad_spec(const std::string& spec, const std::string& why,
                           const std::vector<Exercise>& table) {
  throw std::invalid_argument(fmt::format(
      "--impl '{}': {}; use reference, mine, or a list like ex01=mine,ex03=mine (exercises: {}; "
      "each one mine or reference)",
      spec, why, valid_names(table)));
}

// exercise name -> "mine" | "reference", for every exercise in the table.
std::map<std::string, std::string> parse_spec(const std::string& spec,
                                              const std::vector<Exercise>& table) {
  std::map<std::string, std::string> wanted;
  if (spec == "reference" || spec == "mine") {
    for (const Exercise& e : table) wanted[e.name] = spec;
    return wanted;
  }
  for (const Exercise& e : table) wanted[e.name] = "reference";
  if (spec.empty()) bad_spec(spec, "empty", table);
  std::istringstream items(spec);
  std::string item;
  std::map<std::string, bool> seen;
  while (std::getline(items, item, ',')) {
    const auto eq = item.find('=');
    if (eq == std::string::npos) bad_spec(spec, fmt::format("'{}' is not NAME=SIDE", item), table);
    const std::string name = item.substr(0, eq), side = item.substr(eq + 1);
    if (!wanted.count(name)) bad_spec(spec, fmt::format("no exercise '{}'", name), table);
    if (side != "mine" && side != "reference")
      bad_spec(spec, fmt::format("'{}' must be mine or reference", side), table);
    if (seen[name]) bad_spec(spec, fmt::format("{} is given twice", name), table);
    seen[name] = true;
    wanted[name] = side;
  }
  if (spec.back() == ',') bad_spec(spec, "ends with a comma", table);
  return wanted;
}

// True when the student's version is still a stub (its probe throws NotImplemented). Any
// other error counts as written: the lesson will show that error where it happens.
bool still_a_stub(const Exercise& mine) {
  try {
    mine.probe();
  } catch (const NotImplemented&) {
    return true;
  } catch (...) {
  }
  return false;
}

}  // namespace

std::vector<ExerciseChoice> select_exercises(const std::string& spec,
                                             const std::vector<Exercise>& reference,
                                             const std::vector<Exercise>& mine, std::ostream& out) {
  const std::map<std::string, std::string> wanted = parse_spec(spec, reference);
  std::vector<ExerciseChoice> choices;
  SeamTables tables = reference::seams();
  for (size_t i = 0; i < reference.size(); ++i) {
    ExerciseChoice choice{reference[i].name, "reference", false};
    if (wanted.at(choice.name) == "mine") {
      if (still_a_stub(mine.at(i))) {
        choice.fell_back = true;
        fmt::print(out, "{} not implemented yet: using the reference\n", choice.name);
      } else {
        choice.installed = "mine";
      }
    }
    (choice.installed == "mine" ? mine.at(i) : reference[i]).install(tables);
    choices.push_back(choice);
  }
  use_seams(tables);
  return choices;
}

void select_unprobed(const std::string& spec) {
  const std::vector<Exercise>& reference = reference::exercise_table();
  const std::vector<Exercise>& mine = mine::exercise_table();
  const std::map<std::string, std::string> wanted = parse_spec(spec, reference);
  SeamTables tables = reference::seams();
  std::vector<ExerciseChoice> choices;
  for (size_t i = 0; i < reference.size(); ++i) {
    const std::string& side = wanted.at(reference[i].name);
    (side == "mine" ? mine.at(i) : reference[i]).install(tables);
    choices.push_back({reference[i].name, side, false});
  }
  use_seams(tables);
  g_installed = choices;
  g_selected = spec;
}

bool installed_mine(const std::string& exercise) {
  for (const ExerciseChoice& c : g_installed)
    if (c.name == exercise) return c.installed == "mine";
  return false;
}

void select_impl(const std::string& spec, std::ostream& out) {
  g_installed = select_exercises(spec, reference::exercise_table(), mine::exercise_table(), out);
  g_selected = spec;
}

void select_impl(const std::string& spec) {
  select_impl(spec, std::cout);
}

const std::string& selected_impl() {
  return g_selected;
}

const std::vector<ExerciseChoice>& installed_exercises() {
  return g_installed;
}

const SeamTables& selected_seams() {
  return seams_slot();
}

void use_seams(const SeamTables& tables) {
  seams_slot() = tables;
}

}  // namespace mgpu::ex
