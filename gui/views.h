// The planner's views. Each shows one aspect of a SimResult (or a search, or
// a run record) and keeps the numbers it drew so tests can compare them with
// `loom plan --json`.
#pragma once

#include <QTableWidget>
#include <QWidget>
#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "core/run_record.h"
#include "sim/search.h"
#include "sim/simulate.h"

QT_BEGIN_NAMESPACE
class QChartView;
class QLabel;
QT_END_NAMESPACE

namespace loom::gui {

// 1. Memory per rank of each pipeline stage as stacked bars (weights,
// gradients, optimizer, activations, buffers, runtime reserve) against the
// device capacity, with the reason when it does not fit.
class MemoryView : public QWidget {
 public:
  explicit MemoryView(QWidget* parent = nullptr);
  void show_result(const SimResult* r);
  // Drawn values, GB per stage per component (component -> stages).
  std::map<std::string, std::vector<double>> drawn_gb;
  double drawn_capacity_gb = 0;
  QString verdict() const;

 private:
  QChartView* view_;
  QLabel* why_;
};

// 2. Step-time breakdown of the critical stage: forward, backward,
// recompute, exposed TP/EP/PP/DP communication, bubble, optimizer.
class BreakdownView : public QWidget {
 public:
  explicit BreakdownView(QWidget* parent = nullptr);
  void show_result(const SimResult* r);
  std::map<std::string, double> drawn_ms;

 private:
  QChartView* view_;
  QLabel* figures_;
};

// 3. Traffic per link class: bytes one rank sends per step and the time of
// each collective category.
class TrafficView : public QTableWidget {
 public:
  explicit TrafficView(QWidget* parent = nullptr);
  void show_result(const SimResult* r);
  // Drawn values per category ("tp", "pp", "dp", "ep"): bytes on NVLink,
  // PCIe and the network, time per step (s), calls per step.
  std::map<std::string, std::vector<double>> drawn;
};

// 4. Pipeline timeline (Gantt): a row per stage and stream, forward/backward
// blocks per micro-batch, communication, idle gaps visible. Mouse wheel
// zooms around the pointer, drag pans, double-click resets.
class TimelineView : public QWidget {
 public:
  explicit TimelineView(QWidget* parent = nullptr);
  void show_result(const SimResult* r);
  QSize sizeHint() const override { return {900, 360}; }
  double zoom() const { return zoom_; }
  // The step the timeline spans and the ops it draws (0 when empty).
  double drawn_step_s() const { return r_ ? r_->timeline.step_time_s : 0; }
  size_t drawn_ops() const { return r_ ? std::min(r_->program.ops.size(), r_->timeline.ops.size()) : 0; }

 protected:
  void paintEvent(QPaintEvent*) override;
  void wheelEvent(QWheelEvent*) override;
  void mousePressEvent(QMouseEvent*) override;
  void mouseMoveEvent(QMouseEvent*) override;
  void mouseDoubleClickEvent(QMouseEvent*) override;

 private:
  const SimResult* r_ = nullptr;
  double zoom_ = 1, offset_s_ = 0;
  int drag_x_ = -1;
  double drag_offset_ = 0;
};

// 6a. Throughput vs peak memory of every fitting candidate, the Pareto front
// as a line.
class ScatterView : public QWidget {
 public:
  explicit ScatterView(QWidget* parent = nullptr);
  void show_search(const SearchResult* s);
  // Layouts shown, markers drawn (layouts on one spot share one), front points.
  int drawn_layouts = 0, drawn_points = 0, drawn_front = 0;

 private:
  QChartView* view_;
};

// 6b. Heatmap: tp x pp, each cell the best MFU among fitting candidates with
// that (tp, pp), blank when none fits.
class HeatmapView : public QWidget {
 public:
  explicit HeatmapView(QWidget* parent = nullptr);
  void show_search(const SearchResult* s);
  std::map<std::pair<int, int>, double> best_mfu;  // (tp, pp) -> MFU
  QSize sizeHint() const override { return {700, 420}; }

 protected:
  void paintEvent(QPaintEvent*) override;
};

// 7. Pinned layouts side by side: one column per layout.
class CompareView : public QTableWidget {
 public:
  explicit CompareView(QWidget* parent = nullptr);
  void pin(const SimResult& r);
  void clear_pins();
  int pinned() const { return columnCount(); }
};

// 8. A run record from `loom execute` over the prediction: per phase,
// predicted and measured side by side as bars (times), and a table with the
// error of every row.
class MeasuredView : public QWidget {
 public:
  explicit MeasuredView(QWidget* parent = nullptr);
  // `rows`: (name, predicted, measured) in the row's unit; empty clears.
  void show_rows(const std::vector<std::tuple<std::string, double, double>>& rows, const QString& title);
  QTableWidget* table() const { return table_; }
  int bars() const { return bars_; }
  QString title;

 private:
  QChartView* view_;
  QTableWidget* table_;
  int bars_ = 0;
};

}  // namespace loom::gui
