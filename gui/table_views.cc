// Table views: traffic per link class, pinned layouts, measured vs predicted.
#include <QHeaderView>
#include <cmath>

#include "gui/views.h"
#include "sim/report.h"

namespace loom::gui {

namespace {

QTableWidgetItem* cell(const QString& text, bool right = true) {
  auto* it = new QTableWidgetItem(text);
  it->setFlags(it->flags() & ~Qt::ItemIsEditable);
  if (right) it->setTextAlignment(Qt::AlignRight | Qt::AlignVCenter);
  return it;
}

QString hb(double bytes) { return QString::fromStdString(human_bytes(bytes)); }
QString hs(double s) { return QString::fromStdString(human_seconds(s)); }

}  // namespace

TrafficView::TrafficView(QWidget* parent) : QTableWidget(parent) {
  setColumnCount(9);
  setHorizontalHeaderLabels({"collective", "calls/step", "NVLink", "PCIe", "network", "time/step",
                             "typical call", "busbw", "algorithm"});
  horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
  verticalHeader()->hide();
}

void TrafficView::show_result(const SimResult* r) {
  setRowCount(0);
  if (!r) return;
  const Traffic& t = r->traffic;
  const char* names[] = {"TP (layer collectives)", "PP (activations, gradients)", "DP / ZeRO (gradients, params)",
                         "EP (all-to-all)"};
  for (int k = 0; k < kNumCommKinds; ++k) {
    const int row = rowCount();
    insertRow(row);
    setItem(row, 0, cell(names[k], false));
    setItem(row, 1, cell(QString::number(t.calls[k], 'f', 0)));
    for (int l = 0; l < kNumLinkClasses; ++l) setItem(row, 2 + l, cell(hb(t.bytes[k][l])));
    setItem(row, 5, cell(hs(t.time_s[k])));
    setItem(row, 6, cell(t.call_bytes[k] > 0 ? hb(t.call_bytes[k]) : "-"));
    setItem(row, 7, cell(t.busbw_bytes_per_s[k] > 0 ? QString("%1 GB/s").arg(t.busbw_bytes_per_s[k] / 1e9, 0, 'f', 1) : "-"));
    setItem(row, 8, cell(t.calls[k] > 0 ? QString("%1 / %2").arg(comm_algo_name(t.algo[k])).arg(comm_proto_name(t.proto[k]))
                                        : "-", false));
  }
  const int row = rowCount();
  insertRow(row);
  setItem(row, 0, cell("total bytes one rank sends per step", false));
  for (int l = 0; l < kNumLinkClasses; ++l) setItem(row, 2 + l, cell(hb(t.link_bytes(LinkClass(l)))));
}

CompareView::CompareView(QWidget* parent) : QTableWidget(parent) {
  const QStringList rows{"layout", "fits", "step time", "tokens/s", "MFU", "peak memory / rank", "forward", "backward",
                         "recompute", "TP comm", "PP comm", "DP comm", "bubble", "optimizer", "NVLink bytes/step",
                         "network bytes/step"};
  setRowCount(int(rows.size()));
  setVerticalHeaderLabels(rows);
  horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
}

void CompareView::pin(const SimResult& r) {
  const int col = columnCount();
  insertColumn(col);
  setHorizontalHeaderItem(col, new QTableWidgetItem(QString("#%1").arg(col + 1)));
  const StepBreakdown& t = r.time;
  const QStringList v{QString::fromStdString(r.layout.to_string()),
                      r.memory.fits ? "yes" : "NO",
                      hs(r.figures.step_time_s),
                      QString::number(r.figures.tokens_per_s, 'f', 0),
                      QString("%1%").arg(100 * r.figures.mfu, 0, 'f', 1),
                      hb(r.memory.peak_bytes()),
                      hs(t.forward_s),
                      hs(t.backward_s),
                      hs(t.recompute_s),
                      hs(t.tp_comm_s),
                      hs(t.pp_comm_s),
                      hs(t.dp_comm_s),
                      hs(t.bubble_s),
                      hs(t.optimizer_s),
                      hb(r.traffic.link_bytes(LinkClass::kNvlink)),
                      hb(r.traffic.link_bytes(LinkClass::kNetwork))};
  for (int i = 0; i < v.size(); ++i) setItem(i, col, cell(v[i], i != 0));
}

void CompareView::clear_pins() { setColumnCount(0); }

MeasuredView::MeasuredView(QWidget* parent) : QTableWidget(parent) {
  setColumnCount(4);
  setHorizontalHeaderLabels({"phase", "predicted", "measured", "error"});
  horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
  verticalHeader()->hide();
}

void MeasuredView::show_rows(const std::vector<std::tuple<std::string, double, double>>& rows, const QString& t) {
  title = t;
  setRowCount(0);
  for (const auto& [name, pred, meas] : rows) {
    const int row = rowCount();
    insertRow(row);
    setItem(row, 0, cell(QString::fromStdString(name), false));
    const bool secs = name.find("tokens") == std::string::npos && name.find("memory") == std::string::npos;
    auto fmt = [&](double v) {
      return secs ? hs(v) : name.find("memory") != std::string::npos ? hb(v) : QString::number(v, 'f', 0);
    };
    setItem(row, 1, cell(fmt(pred)));
    setItem(row, 2, cell(fmt(meas)));
    const double err = pred != 0 ? meas / pred - 1 : 0;
    auto* e = cell(pred != 0 ? QString("%1%2%").arg(err >= 0 ? "+" : "").arg(100 * err, 0, 'f', 0) : "-");
    if (std::fabs(err) > 0.2) e->setForeground(QColor(0xb0, 0x00, 0x20));
    setItem(row, 3, e);
  }
}

}  // namespace loom::gui
