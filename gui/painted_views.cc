// Custom-painted views: the pipeline Gantt and the tp x pp heatmap.
#include <QMouseEvent>
#include <QPainter>
#include <QWheelEvent>
#include <algorithm>
#include <cmath>
#include <set>

#include "gui/views.h"

namespace loom::gui {

namespace {

QColor op_color(OpKind k) {
  switch (k) {
    case OpKind::kForward: return QColor(0x4c, 0x72, 0xb0);
    case OpKind::kBackward: return QColor(0x55, 0xa8, 0x68);
    case OpKind::kWeightGrad: return QColor(0x8c, 0xc8, 0x96);
    case OpKind::kSendActivation:
    case OpKind::kRecvActivation:
    case OpKind::kSendGrad:
    case OpKind::kRecvGrad: return QColor(0xdd, 0x84, 0x52);
    case OpKind::kParamGather:
    case OpKind::kGradSync: return QColor(0x81, 0x72, 0xb3);
    case OpKind::kOptimizer: return QColor(0x93, 0x78, 0x60);
  }
  return Qt::gray;
}

}  // namespace

TimelineView::TimelineView(QWidget* parent) : QWidget(parent) {
  setMinimumHeight(200);
  setMouseTracking(false);
}

void TimelineView::show_result(const SimResult* r) {
  r_ = r;
  zoom_ = 1;
  offset_s_ = 0;
  update();
}

void TimelineView::paintEvent(QPaintEvent*) {
  QPainter p(this);
  p.fillRect(rect(), Qt::white);
  p.setRenderHint(QPainter::Antialiasing, false);
  if (!r_ || r_->timeline.ops.empty()) {
    p.drawText(rect(), Qt::AlignCenter, "no layout evaluated");
    return;
  }
  const Program& prog = r_->program;
  const Timeline& tl = r_->timeline;
  const int pp = std::max(1, r_->layout.pp);
  // Rows: per stage, the compute stream and (when used) its comm streams.
  std::set<std::pair<int, int>> used;
  for (const Op& op : prog.ops) used.insert({op.stage, int(op.stream)});
  std::vector<std::pair<int, int>> rows(used.begin(), used.end());
  const int left = 120, top = 28, bottom = 40, row_h = std::clamp((height() - top - bottom) / int(rows.size()), 14, 40);
  const double span = tl.step_time_s / zoom_;
  const double w = std::max(1, width() - left - 10);
  auto X = [&](double t) { return left + (t - offset_s_) / span * w; };
  QFont f = font();
  f.setPointSizeF(8);
  p.setFont(f);
  p.drawText(QRect(left, 4, width() - left, 20), Qt::AlignLeft | Qt::AlignVCenter,
             QString("%1: step %2 ms, %3 micro-batches on %4 stage(s); wheel zooms, drag pans, double-click resets")
                 .arg(QString::fromStdString(r_->layout.to_string()))
                 .arg(tl.step_time_s * 1e3, 0, 'f', 2)
                 .arg(prog.config.micro_batches)
                 .arg(pp));
  for (size_t ri = 0; ri < rows.size(); ++ri) {
    const int y = top + int(ri) * row_h;
    p.setPen(Qt::black);
    p.drawText(QRect(4, y, left - 8, row_h), Qt::AlignRight | Qt::AlignVCenter,
               QString("stage %1 %2").arg(rows[ri].first).arg(stream_name(Stream(rows[ri].second))));
    p.fillRect(QRectF(left, y + 1, w, row_h - 2), QColor(0xf2, 0xf2, 0xf2));  // idle shows as grey
  }
  p.setClipRect(QRect(left, top, int(w), int(rows.size()) * row_h));
  for (size_t i = 0; i < prog.ops.size() && i < tl.ops.size(); ++i) {
    const Op& op = prog.ops[i];
    OpTiming t = tl.ops[i];
    // Communication ops wait for their peer: draw the transfer itself (the
    // op's duration, ending when it completes) so waiting shows as idle.
    if (op.stream != Stream::kCompute && i < r_->durations_s.size()) t.start_s = std::max(t.start_s, t.end_s - r_->durations_s[i]);
    if (t.end_s <= t.start_s) continue;
    const int ri = int(std::lower_bound(rows.begin(), rows.end(), std::make_pair(int(op.stage), int(op.stream))) - rows.begin());
    const int y = top + ri * row_h;
    QRectF box(X(t.start_s), y + 2, std::max(1.0, X(t.end_s) - X(t.start_s)), row_h - 4);
    QColor c = op_color(op.kind);
    if (op.kind == OpKind::kForward || op.kind == OpKind::kBackward) c = c.lighter(100 + 12 * (op.chunk % 3));
    p.fillRect(box, c);
    p.setPen(c.darker(140));
    p.drawRect(box);
    if (op.micro >= 0 && box.width() > 16) {
      p.setPen(Qt::white);
      p.drawText(box, Qt::AlignCenter, QString("%1%2").arg(op.kind == OpKind::kForward ? "F" : op.kind == OpKind::kBackward ? "B" : op.kind == OpKind::kWeightGrad ? "W" : "").arg(op.micro));
    }
  }
  p.setClipping(false);
  // Time axis.
  const int ay = top + int(rows.size()) * row_h + 4;
  p.setPen(Qt::black);
  p.drawLine(left, ay, int(left + w), ay);
  // Ticks on a 1-2-5 ladder, at most ~10 across; labels in s or ms.
  double step = std::pow(10.0, std::floor(std::log10(span / 10)));
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (span / (step * m) <= 10) {
      step *= m;
      break;
    }
  const bool secs = span >= 2.0;
  for (double t = std::ceil(offset_s_ / step) * step; t <= offset_s_ + span + 1e-12; t += step) {
    const int x = int(X(t));
    p.drawLine(x, ay, x, ay + 4);
    p.drawText(QRect(x - 50, ay + 4, 100, 14), Qt::AlignCenter,
               secs ? QString("%1 s").arg(t, 0, 'g', 6) : QString("%1 ms").arg(t * 1e3, 0, 'g', 6));
  }
}

void TimelineView::wheelEvent(QWheelEvent* e) {
  if (!r_) return;
  const double w = std::max(1, width() - 130);
  const double span = r_->timeline.step_time_s / zoom_;
  const double at = offset_s_ + (e->position().x() - 120) / w * span;
  zoom_ = std::clamp(zoom_ * (e->angleDelta().y() > 0 ? 1.25 : 0.8), 1.0, 1000.0);
  const double nspan = r_->timeline.step_time_s / zoom_;
  offset_s_ = std::clamp(at - (e->position().x() - 120) / w * nspan, 0.0, r_->timeline.step_time_s - nspan);
  update();
}

void TimelineView::mousePressEvent(QMouseEvent* e) {
  drag_x_ = int(e->position().x());
  drag_offset_ = offset_s_;
}

void TimelineView::mouseMoveEvent(QMouseEvent* e) {
  if (!r_ || drag_x_ < 0) return;
  const double span = r_->timeline.step_time_s / zoom_;
  offset_s_ = std::clamp(drag_offset_ - (e->position().x() - drag_x_) / std::max(1, width() - 130) * span, 0.0,
                         r_->timeline.step_time_s - span);
  update();
}

void TimelineView::mouseDoubleClickEvent(QMouseEvent*) {
  zoom_ = 1;
  offset_s_ = 0;
  update();
}

HeatmapView::HeatmapView(QWidget* parent) : QWidget(parent) { setMinimumHeight(200); }

void HeatmapView::show_search(const SearchResult* s) {
  best_mfu.clear();
  if (s)
    for (const Candidate& c : s->ranked) {
      double& v = best_mfu[{c.layout.tp, c.layout.pp}];
      v = std::max(v, c.estimate.figures.mfu);
    }
  update();
}

void HeatmapView::paintEvent(QPaintEvent*) {
  QPainter p(this);
  p.fillRect(rect(), Qt::white);
  if (best_mfu.empty()) {
    p.drawText(rect(), Qt::AlignCenter, "run a search to fill the tp x pp heatmap");
    return;
  }
  std::set<int> tps, pps;
  double hi = 0;
  for (const auto& [k, v] : best_mfu) tps.insert(k.first), pps.insert(k.second), hi = std::max(hi, v);
  const int left = 70, top = 40, cw = std::max(40, (width() - left - 20) / int(pps.size())),
            ch = std::max(24, (height() - top - 40) / int(tps.size()));
  p.drawText(QRect(left, 6, width() - left, 20), Qt::AlignLeft, "Best MFU per (tp, pp) among fitting layouts");
  int col = 0;
  for (int pp : pps) {
    p.drawText(QRect(left + col * cw, top - 18, cw, 16), Qt::AlignCenter, QString("pp=%1").arg(pp));
    int row = 0;
    for (int tp : tps) {
      if (col == 0) p.drawText(QRect(0, top + row * ch, left - 6, ch), Qt::AlignRight | Qt::AlignVCenter, QString("tp=%1").arg(tp));
      QRect cell(left + col * cw, top + row * ch, cw - 2, ch - 2);
      auto it = best_mfu.find({tp, pp});
      if (it == best_mfu.end()) {
        p.fillRect(cell, QColor(0xee, 0xee, 0xee));
        p.drawText(cell, Qt::AlignCenter, "-");
      } else {
        const double f = hi > 0 ? it->second / hi : 0;  // viridis-like ramp from dark blue to yellow
        QColor c = QColor::fromHsvF(0.66 - 0.5 * f, 0.8, 0.35 + 0.6 * f);
        p.fillRect(cell, c);
        p.setPen(f > 0.5 ? Qt::black : Qt::white);
        p.drawText(cell, Qt::AlignCenter, QString("%1%").arg(100 * it->second, 0, 'f', 1));
        p.setPen(Qt::black);
      }
      ++row;
    }
    ++col;
  }
}

}  // namespace loom::gui
