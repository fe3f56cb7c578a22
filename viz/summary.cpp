// The summary: one row per rank with busy, communication and idle time, bubble and overlap
// percentages and peak memory, and under it what the lesson's theory predicted (trace metadata
// "predictions"), e.g. "bubble 27.3% (theory 27.3%)".
#include <algorithm>
#include <cstdio>
#include <string>

#include "viz/panels.h"

namespace mgpu::viz {

namespace {
std::string percent(double fraction) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f%%", 100 * fraction);
  return buf;
}

// Keys of metadata["predictions"] that are fractions, shown beside the measured value.
struct Measured {
  const char* key;
  const char* label;
  double (*measure)(const TraceView&);
};
double mean_bubble(const TraceView& v) {
  double sum = 0;
  for (int r = 0; r < v.num_ranks(); ++r) sum += v.summary(r).bubble;
  return v.num_ranks() ? sum / v.num_ranks() : 0;
}
double mean_overlap(const TraceView& v) {
  double sum = 0;
  for (int r = 0; r < v.num_ranks(); ++r) sum += v.summary(r).overlap;
  return v.num_ranks() ? sum / v.num_ranks() : 0;
}
constexpr Measured kMeasured[] = {
    {"bubble_fraction", "bubble", mean_bubble},
    {"overlap_fraction", "overlap", mean_overlap},
};
}  // namespace

void draw_summary(const PanelContext& ctx, const TraceView& view, const std::string& id) {
  // Measured vs theory, one line.
  std::string line;
  for (const Measured& m : kMeasured) {
    if (auto theory = view.prediction(m.key)) {
      if (!line.empty()) line += "    ";
      line += std::string(m.label) + " " + percent(m.measure(view)) + " (theory " +
              percent(*theory) + ")";
    }
  }
  const auto& md = view.trace().metadata;
  if (md.is_object() && md.contains("predictions") && md["predictions"].is_object()) {
    for (const auto& [key, value] : md["predictions"].items()) {
      const bool shown = std::any_of(std::begin(kMeasured), std::end(kMeasured),
                                     [&](const Measured& m) { return key == m.key; });
      if (shown || !value.is_number()) continue;
      char buf[96];
      std::snprintf(buf, sizeof buf, "%s%s %.4g (theory)", line.empty() ? "" : "    ", key.c_str(),
                    value.get<double>());
      line += buf;
    }
  }
  if (view.summary_step())
    line = "step " + std::to_string(*view.summary_step() + 1) + " of the run" +
           (line.empty() ? "" : ":    ") + line;
  if (!line.empty()) ImGui::TextUnformatted(line.c_str());

  const ImGuiTableFlags flags = ImGuiTableFlags_Borders | ImGuiTableFlags_RowBg |
                                ImGuiTableFlags_SizingFixedFit | ImGuiTableFlags_NoSavedSettings |
                                ImGuiTableFlags_NoHostExtendX;
  if (!ImGui::BeginTable(id.c_str(), 8, flags)) return;
  for (const char* h :
       {"rank", "busy", "comm", "idle", "bubble", "overlap", "sent", "peak memory"}) {
    ImGui::TableSetupColumn(h);
  }
  ImGui::TableHeadersRow();
  for (int r = 0; r < view.num_ranks(); ++r) {
    const RankSummary& s = view.summary(r);
    ImGui::TableNextRow();
    ImGui::TableNextColumn();
    ImGui::Text("GPU %d", r);
    for (const std::string& cell :
         {format_duration(s.busy), format_duration(s.comm), format_duration(s.idle),
          percent(s.bubble), s.comm > 0 ? percent(s.overlap) : std::string("-"),
          s.bytes_sent > 0 ? format_bytes(static_cast<double>(s.bytes_sent)) : std::string("-"),
          s.peak_bytes > 0 ? format_bytes(static_cast<double>(s.peak_bytes)) : std::string("-")}) {
      ImGui::TableNextColumn();
      ImGui::TextUnformatted(cell.c_str());
    }
  }
  ImGui::EndTable();
  (void)ctx;
}

void draw_legend(const PanelContext& ctx) {
  const Palette& p = ctx.pal;
  struct Key {
    const char* name;
    ImU32 colour;
  };
  const Key keys[] = {{"forward", p.forward},
                      {"backward", p.backward},
                      {"backward (weights)", p.backward_weight},
                      {"optimizer", p.optimizer},
                      {"other compute", p.compute},
                      {"communication", p.comm},
                      {"idle (bubble)", p.idle_hatch}};
  const float box = ImGui::GetTextLineHeight();
  ImDrawList* dl = ImGui::GetWindowDrawList();
  for (const Key& k : keys) {
    const ImVec2 at = ImGui::GetCursorScreenPos();
    dl->AddRectFilled(at, {at.x + box, at.y + box}, k.colour);
    ImGui::Dummy({box, box});
    ImGui::SameLine();
    ImGui::TextUnformatted(k.name);
    ImGui::SameLine(0, 14 * ctx.scale);
  }
  ImGui::NewLine();
}

void draw_memory_legend(const PanelContext& ctx) {
  const Palette& p = ctx.pal;
  const float box = ImGui::GetTextLineHeight();
  ImDrawList* dl = ImGui::GetWindowDrawList();
  ImGui::TextDisabled("memory");
  static const char* kMemNames[] = {"parameters",  "gradients",    "optimizer state",
                                    "activations", "comm buffers", "workspace"};
  for (int c = 0; c < 6; ++c) {
    ImGui::SameLine(0, 14 * ctx.scale);
    const ImVec2 at = ImGui::GetCursorScreenPos();
    dl->AddRectFilled(at, {at.x + box, at.y + box}, p.memory[c]);
    ImGui::Dummy({box, box});
    ImGui::SameLine();
    ImGui::TextUnformatted(kMemNames[c]);
  }
  ImGui::SameLine(0, 14 * ctx.scale);
  const ImVec2 at = ImGui::GetCursorScreenPos();
  dl->AddLine({at.x, at.y + box / 2}, {at.x + box, at.y + box / 2}, p.capacity, 2 * ctx.scale);
  ImGui::Dummy({box, box});
  ImGui::SameLine();
  ImGui::TextUnformatted("capacity");
}

}  // namespace mgpu::viz
