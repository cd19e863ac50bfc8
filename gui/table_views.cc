// Table views: traffic per link class, pinned layouts, measured vs predicted.
#include <QBarCategoryAxis>
#include <QBarSeries>
#include <QBarSet>
#include <QChart>
#include <QChartView>
#include <QHeaderView>
#include <QVBoxLayout>
#include <QValueAxis>
#include <algorithm>
#include <cmath>

#include "core/figures.h"
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
  drawn.clear();
  if (!r) return;
  const Traffic& t = r->traffic;
  const char* names[] = {"TP (layer collectives)", "PP (activations, gradients)", "DP / ZeRO (gradients, params)",
                         "EP (all-to-all)", "CP (ring: K/V, dK/dV)"};
  static_assert(sizeof(names) / sizeof(names[0]) == kNumCommKinds, "a name for every kind of traffic");
  for (int k = 0; k < kNumCommKinds; ++k) {
    const int row = rowCount();
    insertRow(row);
    setItem(row, 0, cell(names[k], false));
    drawn[comm_kind_name(CommKind(k))] = {t.bytes[k][0], t.bytes[k][1], t.bytes[k][2], t.time_s[k], t.calls[k]};
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

MeasuredView::MeasuredView(QWidget* parent)
    : QWidget(parent), view_(new QChartView(new QChart(), this)), table_(new QTableWidget(this)) {
  auto* lay = new QVBoxLayout(this);
  lay->addWidget(view_, 3);
  lay->addWidget(table_, 2);
  view_->setRenderHint(QPainter::Antialiasing);
  view_->chart()->setAnimationOptions(QChart::NoAnimation);
  view_->chart()->setTitle("Load a run record (Run menu) to compare it with the prediction");
  table_->setColumnCount(4);
  table_->setHorizontalHeaderLabels({"phase", "predicted", "measured", "error"});
  table_->horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
  table_->verticalHeader()->hide();
}

void MeasuredView::show_rows(const std::vector<std::tuple<std::string, double, double>>& rows, const QString& t) {
  title = t;
  table_->setRowCount(0);
  QChart* c = view_->chart();
  c->removeAllSeries();
  for (QAbstractAxis* a : c->axes()) {
    c->removeAxis(a);
    delete a;
  }
  c->setTitle("Predicted vs measured per phase (ms): " + t);
  auto* pred = new QBarSet("predicted");
  auto* meas = new QBarSet("measured");
  pred->setColor(QColor(0x4c, 0x72, 0xb0));
  meas->setColor(QColor(0xdd, 0x84, 0x52));
  QStringList cats;
  double top = 0;
  bars_ = 0;
  for (const auto& [name, p, m] : rows) {
    const int row = table_->rowCount();
    table_->insertRow(row);
    table_->setItem(row, 0, cell(QString::fromStdString(name), false));
    const bool memory = name.find("memory") != std::string::npos, tokens = name.find("tokens") != std::string::npos;
    auto fmt = [&](double v) { return memory ? hb(v) : tokens ? QString::number(v, 'f', 0) : hs(v); };
    table_->setItem(row, 1, cell(fmt(p)));
    table_->setItem(row, 2, cell(fmt(m)));
    // core/figures.h: not finite when only the prediction is 0 (never a silent 0).
    const double err = relative_error(p, m);
    const QString err_text =
        std::isfinite(err) ? QString("%1%2%").arg(err >= 0 ? "+" : "").arg(100 * err, 0, 'f', 0) : QString("inf");
    auto* e = cell(err_text);
    if (!std::isfinite(err) || std::fabs(err) > 0.2) e->setForeground(QColor(0xb0, 0x00, 0x20));
    table_->setItem(row, 3, e);
    if (!memory && !tokens) {
      *pred << p * 1e3;
      *meas << m * 1e3;
      cats << QString("%1\n%2").arg(QString::fromStdString(name)).arg(err_text);
      top = std::max({top, p * 1e3, m * 1e3});
      ++bars_;
    }
  }
  if (bars_ == 0) {
    delete pred;
    delete meas;
    return;
  }
  auto* series = new QBarSeries();
  series->append(pred);
  series->append(meas);
  c->addSeries(series);
  auto* x = new QBarCategoryAxis();
  x->append(cats);
  c->addAxis(x, Qt::AlignBottom);
  series->attachAxis(x);
  auto* y = new QValueAxis();
  y->setRange(0, top * 1.1);
  y->applyNiceNumbers();
  y->setTitleText("ms");
  c->addAxis(y, Qt::AlignLeft);
  series->attachAxis(y);
}

}  // namespace loom::gui
