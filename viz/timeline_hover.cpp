// A timeline under the mouse: the tooltip of the event hovered (its times, sizes, peer and
// group) and click-select.
#include <string>

#include "viz/timeline_internal.h"

namespace mgpu::viz {

using trace::Event;
using trace::Lane;

namespace {

std::string tooltip_line(const char* key, const std::string& value) {
  return std::string(key) + ": " + value;
}

void event_tooltip(const TraceView& view, int i, double origin) {
  const Event& e = view.event(i);
  ImGui::BeginTooltip();
  ImGui::TextUnformatted(e.name.c_str());
  ImGui::Separator();
  ImGui::Text("%s, %s lane, %s", view.rank_label(e.rank).c_str(), trace::lane_name(e.lane),
              e.cat.c_str());
  ImGui::TextUnformatted(tooltip_line("start", format_duration(e.start - origin)).c_str());
  ImGui::TextUnformatted(tooltip_line("duration", format_duration(e.dur)).c_str());
  if (e.wait > 0)
    ImGui::TextUnformatted(
        tooltip_line("waiting for a partner", format_duration(e.wait) + ", then on the wire " +
                                                  format_duration(e.dur - e.wait))
            .c_str());
  if (e.microbatch >= 0) ImGui::Text("micro-batch: %d", e.microbatch);
  if (e.layer >= 0) ImGui::Text("layer: %d", e.layer);
  if (e.chunk >= 0) ImGui::Text("chunk: %d", e.chunk);
  if (e.bytes > 0) ImGui::TextUnformatted(tooltip_line("bytes", format_bytes(e.bytes)).c_str());
  if (e.flops > 0) ImGui::Text("FLOPs: %.3g", e.flops);
  if (e.peer >= 0) ImGui::Text("peer: %s", view.rank_label(e.peer).c_str());
  if (!e.op.empty()) ImGui::Text("op: %s", e.op.c_str());
  if (!e.group.empty())
    ImGui::Text("group: %s%s", e.group.c_str(),
                e.seq >= 0 ? (" #" + std::to_string(e.seq)).c_str() : "");
  ImGui::EndTooltip();
}

}  // namespace

// Hover tooltip and click-select (a click is a press and release without a drag). Returns the
// event clicked, -1 for a click on empty space, -2 when nothing was clicked.
int hover_and_click(const PanelContext& ctx, const TraceView& view, const LaneLayout& layout) {
  const ImGuiIO& io = ImGui::GetIO();
  const auto hit = layout.hit(io.MousePos.y, view.num_ranks());
  const double slack = 2 * ctx.axis.seconds_per_pixel();
  const int under =
      hit ? view.event_at(hit->first, hit->second, ctx.axis.to_time(io.MousePos.x), slack) : -1;
  if (under >= 0 && !ImGui::IsMouseDragging(ImGuiMouseButton_Left, 2))
    event_tooltip(view, under, ctx.axis.origin);
  if (ImGui::IsMouseReleased(ImGuiMouseButton_Left) && io.MouseDragMaxDistanceSqr[0] < 9)
    return under;
  return -2;
}

}  // namespace mgpu::viz
