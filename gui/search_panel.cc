#include "gui/search_panel.h"

#include <algorithm>

#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QLineEdit>
#include <QMetaObject>
#include <QPointer>
#include <QProgressBar>
#include <QPushButton>
#include <QSortFilterProxyModel>
#include <QStandardItemModel>
#include <QTableView>
#include <QVBoxLayout>
#include <thread>

namespace loom::gui {

namespace {

// The table lists the fastest layouts (the scatter and heatmap show them
// all): a search over thousands of GPUs ranks hundreds of thousands, more
// than anyone scrolls and more than a sorted item model holds promptly.
constexpr size_t kMaxTableRows = 5000;


// Sorts by the number behind the text (Qt::UserRole) when there is one.
QStandardItem* num_item(const QString& text, double value) {
  auto* it = new QStandardItem(text);
  it->setData(value, Qt::UserRole);
  it->setEditable(false);
  it->setTextAlignment(Qt::AlignRight | Qt::AlignVCenter);
  return it;
}

}  // namespace

SearchPanel::SearchPanel(QWidget* parent)
    : QWidget(parent),
      start_btn_(new QPushButton("Search all layouts", this)),
      cancel_btn_(new QPushButton("Cancel", this)),
      bar_(new QProgressBar(this)),
      filter_(new QLineEdit(this)),
      status_(new QLabel(this)),
      table_(new QTableView(this)),
      model_(new QStandardItemModel(this)),
      proxy_(new QSortFilterProxyModel(this)) {
  auto* top = new QHBoxLayout();
  top->addWidget(start_btn_);
  top->addWidget(cancel_btn_);
  top->addWidget(bar_, 1);
  filter_->setPlaceholderText("filter layouts, e.g. tp=8 or zero=1 or pp=4");
  auto* lay = new QVBoxLayout(this);
  lay->addLayout(top);
  lay->addWidget(filter_);
  lay->addWidget(status_);
  lay->addWidget(table_, 1);
  cancel_btn_->setEnabled(false);
  bar_->setRange(0, 1000);
  model_->setHorizontalHeaderLabels({"#", "layout", "step time (ms)", "tokens/s", "MFU %", "peak memory (GB)", "Pareto"});
  proxy_->setSourceModel(model_);
  proxy_->setSortRole(Qt::UserRole);
  proxy_->setFilterKeyColumn(1);
  proxy_->setFilterCaseSensitivity(Qt::CaseInsensitive);
  table_->setModel(proxy_);
  table_->setSortingEnabled(true);
  table_->sortByColumn(0, Qt::AscendingOrder);  // fastest first
  table_->setSelectionBehavior(QAbstractItemView::SelectRows);
  table_->horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
  table_->verticalHeader()->hide();
  connect(filter_, &QLineEdit::textChanged, proxy_, &QSortFilterProxyModel::setFilterFixedString);
  connect(start_btn_, &QPushButton::clicked, this, &SearchPanel::start_requested);
  connect(cancel_btn_, &QPushButton::clicked, this, &SearchPanel::cancel);
  connect(table_, &QTableView::doubleClicked, this, [this](const QModelIndex& idx) {
    if (!result_) return;
    const int rank = model_->item(proxy_->mapToSource(idx).row(), 0)->data(Qt::UserRole).toInt();
    if (rank >= 0 && rank < int(result_->ranked.size())) emit layout_chosen(result_->ranked[size_t(rank)].layout);
  });
  status_->setText("Double-click a row to load its layout.");
}

SearchPanel::~SearchPanel() {
  if (cancel_) cancel_->store(true);
}

bool SearchPanel::start(PlannerSession::SearchJob job) {
  if (running_) return false;
  running_ = true;
  cancel_ = std::make_shared<std::atomic<bool>>(false);
  start_btn_->setEnabled(false);
  cancel_btn_->setEnabled(true);
  bar_->setValue(0);
  status_->setText("searching...");
  emit search_started();
  QPointer<SearchPanel> self(this);
  auto cancel = cancel_;
  std::thread([self, job = std::move(job), cancel] {
    auto res = search_layouts(
        *job.eval, job.space,
        [self](double f) {
          QMetaObject::invokeMethod(self, [self, f] {
            if (self) self->bar_->setValue(int(1000 * f)), emit self->progress(f);
          }, Qt::QueuedConnection);
        },
        cancel.get());
    auto shared = res.is_ok() ? std::make_shared<const SearchResult>(std::move(res).value()) : nullptr;
    const QString err = res.is_ok() ? QString() : QString::fromStdString(res.status().message());
    const bool cancelled = cancel->load();
    QMetaObject::invokeMethod(self, [self, shared, err, cancelled] {
      if (!self) return;
      self->running_ = false;
      self->start_btn_->setEnabled(true);
      self->cancel_btn_->setEnabled(false);
      self->result_ = shared;
      self->fill_table();
      QString msg = !err.isEmpty() ? "search failed: " + err
                    : cancelled    ? QString("cancelled after %1 fitting layouts").arg(shared ? shared->ranked.size() : 0)
                                   : QString("%1 layouts enumerated, %2 fit, in %3 s%4; double-click a row to load it")
                                         .arg(shared->enumerated)
                                         .arg(shared->fitting)
                                         .arg(shared->elapsed_s, 0, 'f', 2)
                                         .arg(shared->ranked.size() > kMaxTableRows
                                                  ? QString(" (the fastest %1 listed)").arg(kMaxTableRows)
                                                  : QString());
      if (!cancelled && err.isEmpty()) self->bar_->setValue(1000);
      self->status_->setText(msg);
      emit self->search_finished(cancelled, msg);
    }, Qt::QueuedConnection);
  }).detach();
  return true;
}

void SearchPanel::cancel() {
  if (cancel_) cancel_->store(true);
}

int SearchPanel::rows() const { return proxy_->rowCount(); }

void SearchPanel::fill_table() {
  model_->removeRows(0, model_->rowCount());
  if (!result_) return;
  const SearchResult& s = *result_;
  proxy_->setDynamicSortFilter(false);  // sort once, after the rows are in
  const size_t n = std::min(s.ranked.size(), kMaxTableRows);
  for (size_t i = 0; i < n; ++i) {
    const Candidate& c = s.ranked[i];
    const Figures& f = i < s.refined.size() ? s.refined[i].figures : c.estimate.figures;
    QList<QStandardItem*> row;
    row << num_item(QString::number(i), double(i));
    auto* lay = new QStandardItem(QString::fromStdString(c.layout.to_string()));
    lay->setData(QString::fromStdString(c.layout.to_string()), Qt::UserRole);
    lay->setEditable(false);
    row << lay;
    row << num_item(QString::number(f.step_time_s * 1e3, 'f', 2), f.step_time_s);
    row << num_item(QString::number(f.tokens_per_s, 'f', 0), f.tokens_per_s);
    row << num_item(QString::number(100 * f.mfu, 'f', 1), f.mfu);
    row << num_item(QString::number(c.estimate.peak_memory_bytes / 1e9, 'f', 2), c.estimate.peak_memory_bytes);
    auto* p = new QStandardItem(c.pareto ? "*" : "");
    p->setData(c.pareto ? 1 : 0, Qt::UserRole);
    p->setEditable(false);
    row << p;
    model_->appendRow(row);
  }
  // Keep the closed-form rank in column 0's UserRole for double-click.
  for (int r = 0; r < model_->rowCount(); ++r) model_->item(r, 0)->setData(r, Qt::UserRole);
  proxy_->setDynamicSortFilter(true);
}

}  // namespace loom::gui
