// The Dear ImGui dashboard: per-GPU timelines (compute, communication, idle bubbles), memory by
// category, a per-rank summary with measured-vs-theory numbers, classroom controls that re-run a
// lesson in-process, and a deterministic PNG export for docs and tests.
//
// The program (`mgpu viz`, `mgpu run --viz`) reads the trace(s) and calls one of:
//   run_dashboard(options)                       an interactive window
//   render_screenshot(options, png, w, h)        a PNG, headless (hidden window, Xvfb in CI)
//   viz_main(paths, cli)                         both, driven by command-line options
// viz never includes lessons/: a lesson's "re-run me with these parameters" is a callback.
#pragma once
#include <functional>
#include <iosfwd>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/runtime/trace_event.h"
#include "viz/layout.h"
#include "viz/view_model.h"

namespace mgpu::viz {

// Classroom mode. `params` is a JSON array of parameter specs the program chooses, e.g.
//   [{"name": "microbatches", "type": "int", "min": 1, "max": 32, "value": 8},
//    {"name": "schedule", "type": "choice", "choices": ["gpipe", "1f1b"], "value": "1f1b"}]
// When the user changes one, `run` is called with an object of every current value
// ({"microbatches": 16, "schedule": "1f1b"}) and its trace replaces the first view.
// With `split_by` set (e.g. "schedule" with values {"gpipe", "1f1b"}), every change re-runs once
// per value, all other parameters shared, and the runs replace the views side by side (labelled
// "schedule gpipe", ...); that parameter's own control is not shown. A dashboard with a hook and no
// traces makes its first runs itself.
struct RerunHook {
  std::function<trace::Trace(const nlohmann::json& params)> run;
  nlohmann::json params = nlohmann::json::array();
  std::string split_by;
  std::vector<std::string> split_values;
  // Where the runs happen. Unset: in the frame that asked for them (it waits). Set (the web page,
  // whose frames must not wait): it is handed the runs as one piece of work, starts it on another
  // thread and returns a function saying whether it has finished; each frame asks, the controls
  // wait meanwhile, and the new runs are shown in the first frame after it has.
  std::function<std::function<bool()>(std::function<void()> work)> start;
};

// The most runs shown side by side (--compare traces, --versus schedules): six columns still
// give each run a readable table at 1920 pixels.
inline constexpr int kMaxCompared = 6;

// How compared runs are laid out: side by side (each its own column, one time scale) or stacked.
enum class CompareLayout { columns, rows };

// A time range on the ruler: seconds from the shown step's start.
struct TimeWindow {
  double from = 0, to = 0;
};

struct DashboardOptions {
  std::vector<trace::Trace> traces;  // one, or up to kMaxCompared to compare (one time scale)
  CompareLayout layout = CompareLayout::columns;
  std::vector<std::string> labels;  // optional name per trace (e.g. the file name)
  std::string title = "mgpu-lab";
  bool presentation = false;  // large fonts, high-contrast palette (projector)
  // Memory strips show parameters, gradients and optimizer state only, scaled to them (ZeRO's
  // shards are otherwise a few pixels under the activations).
  bool model_states_only = false;
  bool show_memory = true;  // the memory strips under the timelines (--memory off hides them)
  // Lay the content out to fit this many pixels of height when it can: GPU rows and memory strips
  // shrink (down to a minimum), a summary of many ranks splits into side-by-side blocks. 0: the
  // natural sizes (as tall as the content). The window fits its own height; a presentation
  // screenshot without --height fits 1080 (the projector).
  int fit_height = 0;
  std::optional<RerunHook> rerun;
  std::string error;      // shown in place of the timelines (e.g. a bad trace file)
  std::string highlight;  // a communication group ("tp1") whose events stand out, others dimmed
  int width = 1600;       // run_dashboard: the window's width (its height fits the content)
  // The first frame shows this window of the shown step (seconds from its start, the ruler's 0)
  // instead of the whole step: ring attention's K/V hops are slivers at a step's scale.
  std::optional<TimeWindow> zoom;
  int max_frames = 0;  // run_dashboard: close after this many frames (0: when the user closes it)
};

// Opens a window and runs until it is closed. 0 on success, 2 when no display can be opened.
int run_dashboard(const DashboardOptions& options);

// Renders the dashboard at width x height into a PNG (height 0: as tall as the content needs).
// Deterministic: the same traces give a byte-identical file. 0 on success, 2 when no display can be
// opened, 1 when the PNG cannot be written.
int render_screenshot(const DashboardOptions& options, const std::string& png_path, int width,
                      int height);

// Reads a Chrome-trace file. On a missing file or a malformed trace: no trace, and `error` is one
// line saying what is wrong (the reader's TraceFormatError message).
struct LoadedTrace {
  std::optional<trace::Trace> trace;
  std::string error;
};
LoadedTrace load_trace_or_error(const std::string& path);
// One run from several paths: PyTorch profiler files (one per rank) or folders of them.
LoadedTrace load_run_or_error(const std::vector<std::string>& paths);

struct VizCliOptions {
  std::string screenshot;          // --screenshot out.png: write a PNG instead of opening a window
  int width = 1600;                // --width / --height of the window or screenshot
  int height = 0;                  // 0: as tall as the content (every rank's rows and the summary)
  bool presentation = false;       // --presentation
  bool model_states_only = false;  // --memory model-states
  bool hide_memory = false;        // --memory off
  bool compare = false;  // --compare: 2 to kMaxCompared traces on one time scale (0: step start)
  CompareLayout layout = CompareLayout::columns;  // --layout columns|rows
  std::string title;
  std::string highlight;           // --highlight tp1: that group's communication highlighted
  std::optional<TimeWindow> zoom;  // --zoom 0.2ms..0.6ms
};
// `mgpu viz` after option parsing. Returns the process exit code (2: bad trace, unknown
// --highlight group, or no display); the one-line errors go to `err`.
int viz_main(const std::vector<std::string>& trace_paths, const VizCliOptions& options,
             std::ostream& err);
int viz_main(const std::vector<std::string>& trace_paths, const VizCliOptions& options);

// ---- the dashboard itself (also used directly by tests and the benchmark) -----------------------

struct PanelContext;  // viz/panels.h

// Dashboard state and one frame of ImGui calls. Needs a current ImGui context (with fonts built)
// but no window or GL, so frames can be built and timed headless.
class Dashboard {
 public:
  explicit Dashboard(DashboardOptions options);

  // Issues the ImGui calls for one frame filling `display_w` x `display_h` (call between
  // ImGui::NewFrame() and ImGui::Render()).
  void frame(float display_w, float display_h);

  const DashboardOptions& options() const { return options_; }
  const std::vector<TraceView>& views() const { return views_; }
  // Geometry of the last frame, in window pixels: the shared time axis (in the first view's
  // times) and where each view's lane groups are.
  const TimeAxis& axis() const { return axis_; }
  // The axis a view is drawn with: the shared one moved to that view's own times, so every view's
  // shown step (the one its summary describes, else its run) starts at ruler 0 at the same pixel.
  // Zooming or panning any view moves them all.
  TimeAxis axis(int view) const;
  const LaneLayout& layout(int view) const { return layouts_[view]; }
  // The height (pixels) the last frame's content needed: what a window sized to fit it uses.
  float content_height() const { return content_height_; }
  // Selection (click an event; its partners are highlighted).
  void select(int view, int event);
  int selected_view() const { return selected_view_; }
  int selected_event() const { return selected_event_; }
  const std::vector<int>& selected_partners() const { return partners_; }
  // The text the last frame drew outside the timelines' cells (ruler labels, the run and summary
  // lines, tables, captions, peak labels), with the view each belongs to: what must not overprint.
  const std::vector<TextBox>& text_boxes() const { return text_boxes_; }
  // Fit the content to this height from the next frame on (DashboardOptions::fit_height).
  void fit_to_height(int pixels) { options_.fit_height = pixels; }
  // The last frame's lane height (pixels), and whether it was shrunk to fit fit_height (and the
  // memory strips hidden for it: they go first when even the smallest rows do not fit).
  float lane_height() const { return lane_height_; }
  bool rows_shrunk() const { return rows_shrunk_; }
  bool memory_hidden_to_fit() const { return memory_hidden_to_fit_; }
  // Classroom mode without the mouse: set a parameter's value and re-run (what moving its slider
  // does). False when there is no such parameter or the re-run failed (see rerun_error()).
  bool set_parameter(const std::string& name, const nlohmann::json& value);
  const std::string& rerun_error() const { return rerun_error_; }
  // A re-run started by RerunHook::start has not finished yet (never without `start`).
  bool rerun_pending() const { return pending_ != nullptr; }
  struct PendingRerun;  // a re-run's results or error line (viz/classroom.cpp)
  // The value a classroom control shows: the one the shown runs used (their trace's
  // metadata.config) when they agree and differ from the one asked for (DualPipe brings its own 2
  // virtual stages), else the one asked for; null for no such parameter.
  nlohmann::json shown_parameter(const std::string& name) const;
  // Highlights one communication group's events in every view (its members' rows marked, every
  // other event dimmed); "" clears it. False, and nothing changes, for a group no view has.
  bool highlight(const std::string& group);
  const std::string& highlighted_group() const { return highlight_; }
  // The groups of every view, sorted, without repeats (what the highlight control offers).
  std::vector<std::string> comm_groups() const;
  // Fit the whole run(s) to the width at the next frame.
  void fit() { fit_pending_ = true; }
  // Fits the last training step (what a lesson's ASCII timeline shows); the whole run when the
  // trace has a single step or none. This is the first view of a multi-step trace.
  void fit_last_step() {
    fit_pending_ = true;
    fit_last_step_pending_ = true;
  }

 private:
  void draw_header();
  void draw_classroom_controls();
  void draw_group_control();
  void rerun_with_current_params(const nlohmann::json& previous_params);
  void show_rerun(PendingRerun& done);
  void show_rerun_if_finished();
  void fit_axis_if_pending();
  void draw_views(const PanelContext& ctx);  // the timelines, memory strips and summaries
  float draw_view(int v, const PanelContext& ctx, float column_w);  // returns its rows' height
  void draw_memory_note(const PanelContext& ctx);
  void draw_view_summary(int v, const PanelContext& ctx);
  void plan_rows(const PanelContext& ctx, bool columns);  // lane and strip heights for fit_height
  float views_top_ = 0, rows_height_ = 0;  // last frame: where the views start, their rows' height
  float lane_height_ = 0, strip_height_ = 0;
  bool rows_shrunk_ = false;           // lanes below their natural height (fit_height)
  bool memory_hidden_to_fit_ = false;  // the strips did not fit fit_height: hidden, a note says so
  std::vector<TextBox> text_boxes_;

  DashboardOptions options_;
  std::vector<TraceView> views_;
  std::vector<LaneLayout> layouts_;
  TimeAxis axis_;
  std::vector<double> view_origin_;
  std::vector<float> view_x0_;  // per view: where its time axis starts (its column)
  float content_height_ = 0;    // per view: the time its ruler calls 0 (its shown step start)
  bool fit_pending_ = true;
  bool fit_last_step_pending_ = true;
  bool zoom_pending_ = true;  // options_.zoom applies to the first fit only ("Fit" shows all)
  int selected_view_ = -1, selected_event_ = -1;
  std::vector<int> partners_;
  std::string rerun_error_;
  std::shared_ptr<PendingRerun> pending_;  // a re-run on another thread (RerunHook::start)
  std::string highlight_;
};

// render_screenshot() for a dashboard the caller keeps (tests read its geometry afterwards).
int render_screenshot(Dashboard& dashboard, const std::string& png_path, int width, int height);

// Style and fonts for a fresh ImGui context (fixed font, fixed sizes: deterministic output).
void setup_imgui(bool presentation);

}  // namespace mgpu::viz
