// The full layout search in a worker thread: a sortable, filterable candidate
// table, a progress bar and a cancel button; the UI stays responsive.
#pragma once

#include <QWidget>
#include <atomic>
#include <memory>

#include "gui/planner_session.h"

QT_BEGIN_NAMESPACE
class QLineEdit;
class QProgressBar;
class QPushButton;
class QSortFilterProxyModel;
class QStandardItemModel;
class QTableView;
class QLabel;
QT_END_NAMESPACE

namespace loom::gui {

class SearchPanel : public QWidget {
  Q_OBJECT
 public:
  explicit SearchPanel(QWidget* parent = nullptr);
  ~SearchPanel() override;
  // Starts a search of `job` (returns false when one is already running).
  bool start(PlannerSession::SearchJob job);
  void cancel();
  bool running() const { return running_; }
  const SearchResult* result() const { return result_.get(); }
  int rows() const;
  QTableView* table() const { return table_; }

 signals:
  void search_started();
  void progress(double fraction);
  // Done or cancelled; result() holds what was evaluated.
  void search_finished(bool cancelled, QString message);
  void layout_chosen(const loom::Layout& layout);
  void start_requested();

 private:
  void fill_table();

  QPushButton *start_btn_, *cancel_btn_;
  QProgressBar* bar_;
  QLineEdit* filter_;
  QLabel* status_;
  QTableView* table_;
  QStandardItemModel* model_;
  QSortFilterProxyModel* proxy_;
  std::shared_ptr<std::atomic<bool>> cancel_;
  std::shared_ptr<const SearchResult> result_;
  bool running_ = false;
};

}  // namespace loom::gui
