// Memory, step-time breakdown and throughput-vs-memory views (Qt Charts).
#include <QBarCategoryAxis>
#include <QBarSet>
#include <QChart>
#include <QChartView>
#include <QHorizontalStackedBarSeries>
#include <QLabel>
#include <QLineSeries>
#include <QScatterSeries>
#include <QStackedBarSeries>
#include <QVBoxLayout>
#include <QValueAxis>
#include <algorithm>

#include "gui/views.h"
#include "sim/report.h"

namespace loom::gui {

namespace {

QChartView* make_chart_view(QWidget* parent) {
  auto* v = new QChartView(new QChart(), parent);
  v->setRenderHint(QPainter::Antialiasing);
  v->chart()->legend()->setAlignment(Qt::AlignBottom);
  v->chart()->setAnimationOptions(QChart::NoAnimation);
  return v;
}

void reset_chart(QChart* c, const QString& title) {
  c->removeAllSeries();
  for (QAbstractAxis* a : c->axes()) {
    c->removeAxis(a);
    delete a;
  }
  c->setTitle(title);
}

constexpr double kGB = 1e9;

}  // namespace

MemoryView::MemoryView(QWidget* parent) : QWidget(parent), view_(make_chart_view(this)), why_(new QLabel(this)) {
  auto* lay = new QVBoxLayout(this);
  lay->addWidget(view_, 1);
  why_->setWordWrap(true);
  lay->addWidget(why_);
}

QString MemoryView::verdict() const { return why_->text(); }

void MemoryView::show_result(const SimResult* r) {
  QChart* c = view_->chart();
  reset_chart(c, "Memory per rank, by pipeline stage (GB)");
  drawn_gb.clear();
  drawn_capacity_gb = 0;
  if (!r) {
    why_->setText("");
    return;
  }
  const MemoryReport& m = r->memory;
  struct Comp {
    const char* name;
    double StageMemory::*field;
    QColor color;
  };
  const Comp comps[] = {{"weights", &StageMemory::weights_bytes, QColor(0x4c, 0x72, 0xb0)},
                        {"gradients", &StageMemory::grads_bytes, QColor(0xdd, 0x84, 0x52)},
                        {"optimizer", &StageMemory::optimizer_bytes, QColor(0x55, 0xa8, 0x68)},
                        {"activations", &StageMemory::activations_bytes, QColor(0xc4, 0x4e, 0x52)},
                        {"comm buffers", &StageMemory::comm_buffer_bytes, QColor(0x81, 0x72, 0xb3)},
                        {"workspace", &StageMemory::workspace_bytes, QColor(0xda, 0x8b, 0xc3)},
                        {"inputs", &StageMemory::inputs_bytes, QColor(0xcc, 0xb9, 0x74)},
                        {"runtime reserve", &StageMemory::overhead_bytes, QColor(0x93, 0x78, 0x60)}};
  auto* series = new QStackedBarSeries();
  QStringList cats;
  for (const StageMemory& s : m.stages) cats << QString("stage %1 (%2 layers)").arg(s.stage).arg(s.layers);
  double top = 0;
  for (const StageMemory& s : m.stages) top = std::max(top, s.total_bytes());
  for (const Comp& comp : comps) {
    auto* set = new QBarSet(comp.name);
    set->setColor(comp.color);
    auto& values = drawn_gb[comp.name];
    for (const StageMemory& s : m.stages) {
      values.push_back(s.*comp.field / kGB);
      *set << s.*comp.field / kGB;
    }
    series->append(set);
  }
  c->addSeries(series);
  auto* x = new QBarCategoryAxis();
  x->append(cats);
  c->addAxis(x, Qt::AlignBottom);
  series->attachAxis(x);
  drawn_capacity_gb = m.capacity_bytes / kGB;
  auto* y = new QValueAxis();
  y->setRange(0, std::max(top, m.capacity_bytes) / kGB * 1.1);
  y->applyNiceNumbers();
  y->setTitleText("GB");
  c->addAxis(y, Qt::AlignLeft);
  series->attachAxis(y);
  // The capacity line across the whole plot (a second, hidden x axis).
  auto* cap = new QLineSeries();
  // Usable: the device's capacity less the plan's memory headroom, if any.
  cap->setName(QString(m.capacity_bytes < m.device_bytes ? "usable capacity %1 GB" : "device capacity %1 GB")
                   .arg(drawn_capacity_gb, 0, 'f', 1));
  cap->append(0, drawn_capacity_gb);
  cap->append(1, drawn_capacity_gb);
  QPen pen(Qt::black);
  pen.setStyle(Qt::DashLine);
  pen.setWidth(2);
  cap->setPen(pen);
  c->addSeries(cap);
  auto* x2 = new QValueAxis();
  x2->setRange(0, 1);
  x2->setVisible(false);
  c->addAxis(x2, Qt::AlignTop);
  cap->attachAxis(x2);
  cap->attachAxis(y);
  if (m.fits) {
    why_->setText(QString("Fits: the fullest stage (%1) needs %2 of %3.")
                      .arg(m.worst_stage)
                      .arg(QString::fromStdString(human_bytes(m.peak_bytes())))
                      .arg(QString::fromStdString(human_bytes(m.capacity_bytes))));
    why_->setStyleSheet("");
  } else {
    why_->setText("Does not fit: " + QString::fromStdString(m.why_not()) +
                  ". Try a higher ZeRO stage, more tensor or pipeline parallelism, a smaller micro-batch or recompute.");
    why_->setStyleSheet("color: #b00020; font-weight: bold;");
  }
}

BreakdownView::BreakdownView(QWidget* parent)
    : QWidget(parent), view_(make_chart_view(this)), figures_(new QLabel(this)) {
  auto* lay = new QVBoxLayout(this);
  lay->addWidget(figures_);
  lay->addWidget(view_, 1);
}

void BreakdownView::show_result(const SimResult* r) {
  QChart* c = view_->chart();
  reset_chart(c, "Step time of the critical stage (ms)");
  drawn_ms.clear();
  if (!r) {
    figures_->setText("");
    return;
  }
  const StepBreakdown& t = r->time;
  struct Part {
    const char* name;
    double s;
    QColor color;
  };
  const Part parts[] = {{"forward", t.forward_s, QColor(0x4c, 0x72, 0xb0)},
                        {"backward", t.backward_s, QColor(0x55, 0xa8, 0x68)},
                        {"recompute", t.recompute_s, QColor(0x8c, 0xc6, 0x8f)},
                        {"TP comm (exposed)", t.tp_comm_s, QColor(0xc4, 0x4e, 0x52)},
                        {"EP comm (exposed)", t.ep_comm_s, QColor(0xe3, 0x77, 0xc2)},
                        {"CP comm (exposed)", t.cp_comm_s, QColor(0x17, 0xbe, 0xcf)},
                        {"PP comm (exposed)", t.pp_comm_s, QColor(0xdd, 0x84, 0x52)},
                        {"DP comm (exposed)", t.dp_comm_s, QColor(0x81, 0x72, 0xb3)},
                        {"DP comm contention", t.contention_s, QColor(0xa8, 0x9c, 0xc8)},
                        {"pipeline bubble", t.bubble_s, QColor(0xb0, 0xb0, 0xb0)},
                        {"optimizer", t.optimizer_s, QColor(0x93, 0x78, 0x60)}};
  auto* series = new QHorizontalStackedBarSeries();
  QString table = "<table cellspacing=8><tr>";
  for (const Part& part : parts) {
    drawn_ms[part.name] = part.s * 1e3;
    auto* set = new QBarSet(part.name);
    set->setColor(part.color);
    *set << part.s * 1e3;
    series->append(set);
    table += QString("<td><span style='color:%1'>&#9632;</span> %2<br><b>%3</b> (%4%)</td>")
                 .arg(part.color.name())
                 .arg(part.name)
                 .arg(QString::fromStdString(human_seconds(part.s)))
                 .arg(t.step_time_s > 0 ? 100 * part.s / t.step_time_s : 0, 0, 'f', 1);
  }
  table += "</tr></table>";
  series->setBarWidth(0.5);
  c->addSeries(series);
  auto* y = new QBarCategoryAxis();
  y->append(QStringList{QString("stage %1").arg(r->critical_stage)});
  c->addAxis(y, Qt::AlignLeft);
  series->attachAxis(y);
  auto* x = new QValueAxis();
  x->setRange(0, std::max(1e-9, t.step_time_s * 1e3 * 1.05));
  x->applyNiceNumbers();
  x->setLabelFormat("%.0f");
  x->setTitleText("ms");
  c->addAxis(x, Qt::AlignBottom);
  series->attachAxis(x);
  const Figures& f = r->figures;
  figures_->setText(QString("<b>%1</b> &nbsp; step %2 &nbsp; %3 tokens/s (%4 per GPU) &nbsp; %5 model TFLOP/s per GPU "
                            "&nbsp; MFU %6% &nbsp; HFU %7%")
                        .arg(QString::fromStdString(r->layout.to_string()))
                        .arg(QString::fromStdString(human_seconds(f.step_time_s)))
                        .arg(f.tokens_per_s, 0, 'f', 0)
                        .arg(f.tokens_per_s_per_gpu, 0, 'f', 1)
                        .arg(f.model_tflops_per_gpu, 0, 'f', 1)
                        .arg(100 * f.mfu, 0, 'f', 1)
                        .arg(100 * f.hfu, 0, 'f', 1) +
                    table);
}

ScatterView::ScatterView(QWidget* parent) : QWidget(parent), view_(make_chart_view(this)) {
  auto* lay = new QVBoxLayout(this);
  lay->addWidget(view_);
}

void ScatterView::show_search(const SearchResult* s) {
  QChart* c = view_->chart();
  reset_chart(c, "Throughput vs peak memory per rank (every fitting layout)");
  drawn_layouts = drawn_points = drawn_front = 0;
  if (!s || s->ranked.empty()) return;
  auto* all = new QScatterSeries();
  all->setName("layouts");
  all->setMarkerSize(6);
  all->setColor(QColor(0x4c, 0x72, 0xb0, 120));
  auto* front = new QLineSeries();
  front->setName("Pareto front");
  QPen pen(QColor(0xc4, 0x4e, 0x52));
  pen.setWidth(2);
  front->setPen(pen);
  std::vector<std::pair<double, double>> pf;
  double xmax = 0, ymax = 0;
  for (const Candidate& cnd : s->ranked) {
    xmax = std::max(xmax, cnd.estimate.peak_memory_bytes / kGB);
    ymax = std::max(ymax, cnd.estimate.figures.tokens_per_s);
  }
  // A search over thousands of GPUs ranks hundreds of thousands of layouts,
  // and the chart holds a graphics item per point: layouts that fall on the
  // same spot of a 600 x 400 grid (smaller than a marker) are drawn once.
  constexpr int kCellsX = 600, kCellsY = 400;
  std::vector<uint8_t> taken(size_t(kCellsX) * kCellsY, 0);
  for (const Candidate& cnd : s->ranked) {
    double x = cnd.estimate.peak_memory_bytes / kGB, y = cnd.estimate.figures.tokens_per_s;
    if (cnd.pareto) pf.emplace_back(x, y);
    const int cx = std::min(kCellsX - 1, int(x / (xmax > 0 ? xmax : 1) * kCellsX));
    const int cy = std::min(kCellsY - 1, int(y / (ymax > 0 ? ymax : 1) * kCellsY));
    uint8_t& cell = taken[size_t(cy) * kCellsX + size_t(std::max(0, cx))];
    if (cell) continue;
    cell = 1;
    all->append(x, y);
    ++drawn_points;
  }
  std::sort(pf.begin(), pf.end());
  for (auto [x, y] : pf) front->append(x, y);
  drawn_layouts = int(s->ranked.size());
  drawn_front = int(pf.size());
  c->addSeries(all);
  c->addSeries(front);
  auto* x = new QValueAxis();
  x->setTitleText("peak memory per rank (GB)");
  x->setRange(0, xmax * 1.05);
  x->applyNiceNumbers();
  auto* y = new QValueAxis();
  y->setTitleText("tokens/s");
  y->setRange(0, ymax * 1.05);
  y->applyNiceNumbers();
  y->setLabelFormat("%.0f");
  c->addAxis(x, Qt::AlignBottom);
  c->addAxis(y, Qt::AlignLeft);
  for (QAbstractSeries* se : {static_cast<QAbstractSeries*>(all), static_cast<QAbstractSeries*>(front)}) {
    se->attachAxis(x);
    se->attachAxis(y);
  }
}

}  // namespace loom::gui
