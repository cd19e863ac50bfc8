// loom-gui's window: inputs on the left, the views in tabs, actions in the
// menus. Every input change re-evaluates the layout at once.
#pragma once

#include <QMainWindow>
#include <csignal>
#include <functional>
#include <thread>

#include "core/run_record.h"

#include "gui/planner_session.h"
#include "gui/search_panel.h"
#include "gui/views.h"

QT_BEGIN_NAMESPACE
class QCheckBox;
class QComboBox;
class QDoubleSpinBox;
class QLabel;
class QPlainTextEdit;
class QSpinBox;
class QTabWidget;
QT_END_NAMESPACE

namespace loom::gui {

class MainWindow : public QMainWindow {
  Q_OBJECT
 public:
  // `remember`: read and write QSettings (off in tests).
  explicit MainWindow(bool remember = true, QWidget* parent = nullptr);
  ~MainWindow() override;

  PlannerSession& session() { return session_; }
  // Error reporting: a dialog by default; tests install a sink.
  std::function<void(const QString& title, const QString& message)> error_sink;

  // Actions, also used by tests and --screenshot.
  bool open_model(const QString& path_or_name);
  bool open_hw(const QString& path_or_name);
  void set_layout_text(const QString& layout);  // "dp=2,tp=4,..." into the controls
  void set_gpus(int gpus);
  void set_batch(int global_batch, int seq, const QString& precision);
  // Megatron's --tp-comm-overlap with its userbuffers settings: "" = off, else
  // te1_defaults, te2_defaults or a name from frameworks/tp_overlap/.
  void set_tp_comm_overlap(const QString& cfg);
  // The hardware profile's attention kernel to price (loom plan --attention-kernel); empty: the profile's own.
  void set_attention_kernel(const QString& name);
  bool save_plan(const QString& path);
  bool export_trace(const QString& path);
  bool export_text(const QString& path, const QString& kind);  // "megatron" | "deepspeed"
  bool export_view(const QString& path);                       // current tab, .png or .svg
  bool load_run_record(const QString& path);
  // The measured figures of a run against the current plan's prediction.
  bool show_run_record(const RunRecord& record);
  void pin_current();
  void start_search();
  bool save_screenshots(const QString& dir);
  // Executes the current plan on `ranks` threads of this process (the
  // executor in-process: exec/runtime/execute.h); run_finished() follows.
  bool run_locally(int ranks);

  QString status_text() const;
  QTabWidget* tabs() const { return tabs_; }
  MemoryView* memory_view() const { return memory_; }
  BreakdownView* breakdown_view() const { return breakdown_; }
  TrafficView* traffic_view() const { return traffic_; }
  TimelineView* timeline_view() const { return timeline_; }
  SearchPanel* search_panel() const { return search_; }
  ScatterView* scatter_view() const { return scatter_; }
  HeatmapView* heatmap_view() const { return heatmap_; }
  CompareView* compare_view() const { return compare_; }
  MeasuredView* measured_view() const { return measured_; }

 signals:
  void evaluated();
  void run_finished(int exit_code);

 private:
  void build_inputs();
  void build_menus();
  void read_controls();
  void write_controls();
  void reevaluate();
  void error(const QString& title, const QString& message);

  PlannerSession session_;
  bool remember_;
  bool updating_ = false;
  QComboBox *model_box_, *hw_box_, *precision_, *grad_reduce_, *framework_, *zero_, *schedule_, *recompute_;
  QComboBox* attention_kernel_ = nullptr;  // the profile's measured attention kernels (--attention-kernel)
  QComboBox* tp_overlap_ = nullptr;  // off, or the userbuffers settings (--tp-comm-overlap-cfg)
  QComboBox* cp_comm_ = nullptr;     // with cp > 1: the ring or the all-gathered K/V (Layout::cp_comm)
  QDoubleSpinBox *moe_aux_ = nullptr, *moe_z_ = nullptr, *moe_capacity_ = nullptr;  // MoE options
  QSpinBox *gpus_, *batch_, *seq_, *dp_, *tp_, *pp_, *ep_, *etp_, *cp_, *micro_, *v_, *recompute_layers_;
  QCheckBox *sp_, *overlap_grad_, *overlap_param_;
  QLabel* status_;
  QTabWidget* tabs_;
  MemoryView* memory_;
  BreakdownView* breakdown_;
  TrafficView* traffic_;
  TimelineView* timeline_;
  SearchPanel* search_;
  ScatterView* scatter_;
  HeatmapView* heatmap_;
  CompareView* compare_;
  MeasuredView* measured_;
  QPlainTextEdit* log_;
  // The in-process run (run_locally): its thread, its stop flag.
  std::thread run_thread_;
  volatile std::sig_atomic_t stop_run_ = 0;
  bool run_active_ = false;
};

}  // namespace loom::gui
