// The colour keys above the timelines: event categories (with the timeline's own hatching for a
// comm event's waiting and for a pipeline bubble, so a swatch looks like what it names) and the
// memory categories with the capacity line.
#include <string>

#include "viz/panels.h"
#include "viz/ui.h"

namespace mgpu::viz {

void draw_legend(const PanelContext& ctx, bool any_pipeline) {
  const Palette& p = ctx.pal;
  struct Key {
    const char* name;
    ImU32 colour;
    const Hatch* hatch = nullptr;  // drawn as the timeline draws it (null: a plain box)
  };
  const Hatch wait = comm_wait_hatch(p), bubble = bubble_hatch(p);
  const Key keys[] = {{"forward", p.forward},
                      {"backward", p.backward},
                      {"backward (weights)", p.backward_weight},
                      {"optimizer", p.optimizer},
                      {"other compute", p.compute},
                      {"comm on the wire", p.comm},
                      {"comm waiting for a partner", 0, &wait},
                      {any_pipeline ? "idle (bubble)" : "idle", 0, &bubble}};
  const float box = ImGui::GetTextLineHeight();
  ImDrawList* dl = ImGui::GetWindowDrawList();
  bool first = true;
  for (const Key& k : keys) {
    const float item_w = box + ImGui::GetStyle().ItemSpacing.x + ImGui::CalcTextSize(k.name).x;
    if (!first) fits_on_this_row(item_w, 14 * ctx.scale);  // wraps rather than runs off
    first = false;
    const ImVec2 at = ImGui::GetCursorScreenPos();
    const ImVec2 end{at.x + box, at.y + box};
    if (k.hatch)
      draw_hatched(dl, at, end, *k.hatch, ctx.scale);
    else
      dl->AddRectFilled(at, end, k.colour);
    note_text(ctx, at, end, std::string("swatch: ") + k.name);
    ImGui::Dummy({box, box});
    ImGui::SameLine();
    ImGui::TextUnformatted(k.name);
    note_item(ctx, k.name);
  }
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
