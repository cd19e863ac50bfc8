#include "gui/main_window.h"

#include <QCheckBox>
#include <QDoubleSpinBox>
#include <QComboBox>
#include <QDir>
#include <QDockWidget>
#include <QFileDialog>
#include <QFileInfo>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QInputDialog>
#include <QLabel>
#include <QMenuBar>
#include <QMessageBox>
#include <QPainter>
#include <QPlainTextEdit>
#include <QPointer>
#include <QApplication>
#include <QPushButton>
#include <QSettings>
#include <QSpinBox>
#include <QSplitter>
#include <QSvgGenerator>
#include <QTabWidget>
#include <QTimer>
#include <QVBoxLayout>
#include <filesystem>
#include <unistd.h>

#include "core/compare.h"
#include "exec/runtime/execute.h"
#include "core/json_util.h"
#include "core/resources.h"
#include "core/trace.h"
#include "sim/export.h"

namespace loom::gui {

namespace fs = std::filesystem;

namespace {

// Names of the description files under models/ or hwprofiles/ of every
// resource root (core/resources.h).
QStringList shipped(const char* subdir) {
  QStringList out;
  for (const std::string& root : resource_roots()) {
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(fs::path(root) / subdir, ec))
      if (e.path().extension() == ".json") out << QString::fromStdString(e.path().stem().string());
  }
  out.removeDuplicates();
  out.sort();
  return out;
}

QDoubleSpinBox* dspin(double lo, double hi, double step, int decimals) {
  auto* s = new QDoubleSpinBox();
  s->setRange(lo, hi);
  s->setSingleStep(step);
  s->setDecimals(decimals);
  s->setKeyboardTracking(false);
  return s;
}

QSpinBox* spin(int lo, int hi, int value) {
  auto* s = new QSpinBox();
  s->setRange(lo, hi);
  s->setValue(value);
  s->setKeyboardTracking(false);
  return s;
}

}  // namespace

MainWindow::MainWindow(bool remember, QWidget* parent) : QMainWindow(parent), remember_(remember) {
  setWindowTitle("Loom — what-if planner");
  error_sink = [this](const QString& t, const QString& m) { QMessageBox::warning(this, t, m); };
  tabs_ = new QTabWidget(this);
  memory_ = new MemoryView();
  breakdown_ = new BreakdownView();
  traffic_ = new TrafficView();
  timeline_ = new TimelineView();
  search_ = new SearchPanel();
  scatter_ = new ScatterView();
  heatmap_ = new HeatmapView();
  compare_ = new CompareView();
  measured_ = new MeasuredView();
  auto* frontier = new QSplitter(Qt::Horizontal);
  frontier->addWidget(scatter_);
  frontier->addWidget(heatmap_);
  frontier->setStretchFactor(0, 1);
  frontier->setStretchFactor(1, 1);
  frontier->setSizes({600, 600});
  tabs_->addTab(memory_, "Memory");
  tabs_->addTab(breakdown_, "Step time");
  tabs_->addTab(traffic_, "Traffic");
  tabs_->addTab(timeline_, "Pipeline timeline");
  tabs_->addTab(search_, "Search");
  tabs_->addTab(frontier, "Frontier");
  tabs_->addTab(compare_, "Compare pinned");
  tabs_->addTab(measured_, "Measured");
  setCentralWidget(tabs_);
  build_inputs();
  build_menus();
  log_ = new QPlainTextEdit();
  log_->setReadOnly(true);
  log_->setMaximumBlockCount(5000);
  auto* log_dock = new QDockWidget("Run log", this);
  log_dock->setWidget(log_);
  addDockWidget(Qt::BottomDockWidgetArea, log_dock);
  log_dock->hide();
  connect(search_, &SearchPanel::start_requested, this, &MainWindow::start_search);
  connect(search_, &SearchPanel::search_finished, this, [this](bool, const QString&) {
    scatter_->show_search(search_->result());
    heatmap_->show_search(search_->result());
  });
  connect(search_, &SearchPanel::layout_chosen, this, [this](const Layout& l) {
    session_.layout() = l;
    write_controls();
    reevaluate();
    tabs_->setCurrentWidget(breakdown_);
  });
  if (remember_) {
    QSettings st;
    const QString m = st.value("model").toString(), h = st.value("hw").toString();
    // A remembered file that is gone or broken leaves the defaults.
    if (!m.isEmpty()) (void)session_.load_model(m.toStdString());
    if (!h.isEmpty()) (void)session_.load_hw(h.toStdString());
    session_.request().gpus = st.value("gpus", session_.request().gpus).toInt();
    session_.request().global_batch = st.value("global_batch", qlonglong(session_.request().global_batch)).toLongLong();
    session_.request().seq = st.value("seq", qlonglong(session_.request().seq)).toLongLong();
    session_.request().precision = st.value("precision", "bf16").toString().toStdString();
    session_.request().grad_reduce = st.value("grad_reduce", "fp32").toString().toStdString();
    if (auto l = parse_layout(st.value("layout").toString().toStdString()); l.is_ok() && !st.value("layout").toString().isEmpty())
      session_.layout() = *l;
    restoreGeometry(st.value("geometry").toByteArray());
  }
  write_controls();
  reevaluate();
}

MainWindow::~MainWindow() {
  if (remember_) {
    QSettings st;
    st.setValue("model", QString::fromStdString(session_.model_source()));
    st.setValue("hw", QString::fromStdString(session_.hw_source()));
    st.setValue("gpus", session_.request().gpus);
    st.setValue("global_batch", qlonglong(session_.request().global_batch));
    st.setValue("seq", qlonglong(session_.request().seq));
    st.setValue("precision", QString::fromStdString(session_.request().precision));
    st.setValue("grad_reduce", QString::fromStdString(session_.request().grad_reduce));
    st.setValue("layout", QString::fromStdString(session_.layout().to_string()));
    st.setValue("geometry", saveGeometry());
  }
  stop_run_ = 1;  // a run in progress stops after its current step
  if (run_thread_.joinable()) run_thread_.join();
}

void MainWindow::build_inputs() {
  auto* panel = new QWidget();
  auto* form = new QFormLayout(panel);
  model_box_ = new QComboBox();
  model_box_->setEditable(true);
  model_box_->addItems(shipped("models"));
  hw_box_ = new QComboBox();
  hw_box_->setEditable(true);
  hw_box_->addItems(shipped("hwprofiles"));
  auto browse = [this](QComboBox* box, const char* what, bool model) {
    auto* row = new QWidget();
    auto* h = new QHBoxLayout(row);
    h->setContentsMargins(0, 0, 0, 0);
    h->addWidget(box, 1);
    auto* b = new QPushButton("…");
    b->setToolTip(QString("Open a %1 file").arg(what));
    h->addWidget(b);
    connect(b, &QPushButton::clicked, this, [this, model] {
      QString f = QFileDialog::getOpenFileName(this, model ? "Model config.json" : "Hardware profile", QString(),
                                               "JSON (*.json)");
      if (!f.isEmpty()) model ? open_model(f) : open_hw(f);
    });
    return row;
  };
  form->addRow("Model", browse(model_box_, "Hugging Face config.json", true));
  form->addRow("Hardware", browse(hw_box_, "hardware profile", false));
  gpus_ = spin(1, 1 << 20, 8);
  batch_ = spin(1, 1 << 24, 64);
  seq_ = spin(1, 1 << 22, 1024);
  precision_ = new QComboBox();
  precision_->addItems({"bf16", "fp16", "fp8", "fp32"});
  form->addRow("GPUs", gpus_);
  form->addRow("Global batch (sequences)", batch_);
  form->addRow("Sequence length", seq_);
  form->addRow("Precision", precision_);
  grad_reduce_ = new QComboBox();
  grad_reduce_->addItems({"fp32", "bf16", "fp8"});
  grad_reduce_->setToolTip("Element type of the data-parallel gradient reduction (--grad-reduce): the bytes on the "
                           "wire; the executor sums what arrives in fp32");
  form->addRow("Gradient reduce", grad_reduce_);
  // MoE options (loom plan --moe-aux-loss-coeff / --moe-z-loss-coeff /
  // --moe-capacity-factor): recorded in a saved plan and trained by the
  // executor; enabled for MoE models.
  moe_aux_ = dspin(-1, 999, 0.001, 4);
  moe_aux_->setSpecialValueText("from config");
  moe_aux_->setToolTip("MoE load-balancing loss coefficient; 'from config' = the config's router_aux_loss_coef, else 0");
  moe_z_ = dspin(0, 999, 0.001, 4);
  moe_z_->setToolTip("MoE router z-loss coefficient; 0 = off");
  moe_capacity_ = dspin(0, 1e6, 0.25, 2);
  moe_capacity_->setSpecialValueText("dropless");
  moe_capacity_->setToolTip("MoE expert capacity factor: an expert keeps at most this times its balanced share; "
                            "0 = dropless");
  form->addRow("MoE load-balancing coeff", moe_aux_);
  form->addRow("MoE z-loss coeff", moe_z_);
  form->addRow("MoE capacity factor", moe_capacity_);
  framework_ = new QComboBox();
  framework_->addItems({"(Loom)", "megatron-core", "torchtitan", "deepspeed", "deepseek-v3"});
  framework_->setToolTip("Training stack whose defaults the simulator models (frameworks/*.json): gradient dtype, "
                         "overlaps, FP8 recipe, and the layouts the search tries");
  form->addRow("Framework", framework_);
  attention_kernel_ = new QComboBox();
  attention_kernel_->setToolTip("The attention kernel the stack runs, from those the hardware profile measured "
                                "(--attention-kernel): cuDNN releases differ by up to a quarter on H100, "
                                "FlashAttention-2 by half");
  form->addRow("Attention kernel", attention_kernel_);
  tp_overlap_ = new QComboBox();
  tp_overlap_->addItems(QStringList{"off", "te2_defaults", "te1_defaults"} + shipped("frameworks/tp_overlap"));
  tp_overlap_->setToolTip("Megatron's --tp-comm-overlap (Transformer Engine userbuffers, with sequence parallelism) "
                          "and how TE runs each overlap (--tp-comm-overlap-cfg): TE's own defaults or a stack's "
                          "settings from frameworks/tp_overlap/");
  form->addRow("TP comm overlap", tp_overlap_);
  dp_ = spin(1, 1 << 20, 8);
  tp_ = spin(1, 1024, 1);
  pp_ = spin(1, 1024, 1);
  ep_ = spin(1, 1024, 1);
  etp_ = spin(0, 1024, 0);
  etp_->setSpecialValueText("= tp");
  etp_->setToolTip("Expert tensor parallel size: = tp (experts split like the MLP), or 1 (parallel folding: experts "
                   "whole, ep over tp x dp; needs sequence parallel)");
  cp_ = spin(1, 1024, 1);
  cp_->setToolTip("Context parallelism: each sequence in 2*cp chunks over cp ranks");
  cp_comm_ = new QComboBox();
  cp_comm_->addItems({"p2p", "all_gather", "a2a"});
  cp_comm_->setToolTip("How context-parallel attention exchanges keys and values (Megatron's --cp-comm-type): p2p, "
                       "ring attention, each exchange behind the blocks before it; all_gather, the whole sequence's "
                       "K/V gathered before the attention and the dK/dV reduce-scattered after it, both exposed "
                       "(Llama 3's); a2a, heads exchanged for the sequence around the attention (DeepSpeed-Ulysses; "
                       "cp must divide the heads)");
  micro_ = spin(1, 1 << 16, 1);
  v_ = spin(1, 64, 1);
  zero_ = new QComboBox();
  zero_->addItems({"0 (none)", "1 (optimizer)", "2 (+gradients)", "3 (+parameters)"});
  schedule_ = new QComboBox();
  schedule_->addItems({"gpipe", "1f1b", "interleaved", "dualpipev"});
  recompute_ = new QComboBox();
  recompute_->addItems({"none", "selective", "full"});
  recompute_layers_ = spin(0, 1 << 16, 0);
  recompute_layers_->setSpecialValueText("all");
  recompute_layers_->setToolTip("With full recompute: recompute only the first N layers of each model chunk "
                                "(Megatron's --recompute-method block; Loom's executor runs it too)");
  sp_ = new QCheckBox("sequence parallel");
  overlap_grad_ = new QCheckBox("overlap gradient reduce");
  overlap_param_ = new QCheckBox("overlap parameter gather");
  form->addRow("Data parallel (dp)", dp_);
  form->addRow("Tensor parallel (tp)", tp_);
  form->addRow("Pipeline parallel (pp)", pp_);
  form->addRow("Expert parallel (ep)", ep_);
  form->addRow("Expert TP (etp)", etp_);
  form->addRow("Context parallel (cp)", cp_);
  form->addRow("CP K/V exchange", cp_comm_);
  form->addRow("ZeRO stage", zero_);
  form->addRow("Micro-batch (sequences)", micro_);
  form->addRow("Schedule", schedule_);
  form->addRow("Virtual stages (v)", v_);
  form->addRow(sp_);
  form->addRow("Recompute", recompute_);
  form->addRow("Recomputed layers per chunk", recompute_layers_);
  form->addRow(overlap_grad_);
  form->addRow(overlap_param_);
  status_ = new QLabel();
  status_->setWordWrap(true);
  status_->setMinimumWidth(260);
  form->addRow(status_);
  auto* pin = new QPushButton("Pin this layout for comparison");
  form->addRow(pin);
  connect(pin, &QPushButton::clicked, this, &MainWindow::pin_current);
  auto* dock = new QDockWidget("Inputs", this);
  dock->setWidget(panel);
  dock->setFeatures(QDockWidget::NoDockWidgetFeatures);
  addDockWidget(Qt::LeftDockWidgetArea, dock);
  auto changed = [this] {
    if (updating_) return;
    read_controls();
    reevaluate();
  };
  for (QSpinBox* s : {gpus_, batch_, seq_, dp_, tp_, pp_, ep_, etp_, cp_, micro_, v_, recompute_layers_})
    connect(s, &QSpinBox::valueChanged, this, changed);
  for (QComboBox* c : {precision_, grad_reduce_, framework_, attention_kernel_, tp_overlap_, cp_comm_, zero_, schedule_,
                        recompute_})
    connect(c, &QComboBox::currentIndexChanged, this, changed);
  for (QDoubleSpinBox* d : {moe_aux_, moe_z_, moe_capacity_}) connect(d, &QDoubleSpinBox::valueChanged, this, changed);
  for (QCheckBox* c : {sp_, overlap_grad_, overlap_param_}) connect(c, &QCheckBox::toggled, this, changed);
  connect(model_box_, &QComboBox::activated, this, [this](int) { open_model(model_box_->currentText()); });
  connect(hw_box_, &QComboBox::activated, this, [this](int) { open_hw(hw_box_->currentText()); });
}

void MainWindow::build_menus() {
  QMenu* file = menuBar()->addMenu("&File");
  file->addAction("Save plan…", this, [this] {
    QString f = QFileDialog::getSaveFileName(this, "Save plan", "plan.json", "Plan (*.json)");
    if (!f.isEmpty()) save_plan(f);
  });
  file->addAction("Export predicted trace…", this, [this] {
    QString f = QFileDialog::getSaveFileName(this, "Chrome trace", "predicted_trace.json", "Trace (*.json)");
    if (!f.isEmpty()) export_trace(f);
  });
  file->addAction("Export Megatron arguments…", this, [this] {
    QString f = QFileDialog::getSaveFileName(this, "Megatron arguments", "megatron_args.txt");
    if (!f.isEmpty()) export_text(f, "megatron");
  });
  file->addAction("Export DeepSpeed config…", this, [this] {
    QString f = QFileDialog::getSaveFileName(this, "DeepSpeed config", "ds_config.json");
    if (!f.isEmpty()) export_text(f, "deepspeed");
  });
  file->addAction("Export current view (PNG/SVG)…", this, [this] {
    QString f = QFileDialog::getSaveFileName(this, "Export view", "view.png", "Images (*.png *.svg)");
    if (!f.isEmpty()) export_view(f);
  });
  file->addSeparator();
  file->addAction("Quit", this, &QWidget::close);
  QMenu* run = menuBar()->addMenu("&Run");
  run->addAction("Search all layouts", this, &MainWindow::start_search);
  run->addAction("Pin layout", this, &MainWindow::pin_current);
  run->addAction("Clear pins", this, [this] { compare_->clear_pins(); });
  run->addAction("Load run record…", this, [this] {
    QString f = QFileDialog::getOpenFileName(this, "Run record (loom execute --record)", QString(), "JSON (*.json)");
    if (!f.isEmpty()) load_run_record(f);
  });
  run->addAction("Execute locally (mpirun)…", this, [this] {
    bool ok = false;
    int n = QInputDialog::getInt(this, "Execute locally", "MPI ranks (must equal the plan's GPUs)",
                                 session_.request().gpus, 1, 1024, 1, &ok);
    if (ok) run_locally(n);
  });
}

void MainWindow::write_controls() {
  updating_ = true;
  const PlanRequest& r = session_.request();
  const Layout& l = session_.layout();
  model_box_->setCurrentText(QString::fromStdString(session_.model_source()));
  hw_box_->setCurrentText(QString::fromStdString(session_.hw_source()));
  gpus_->setValue(r.gpus);
  batch_->setValue(int(r.global_batch));
  seq_->setValue(int(r.seq));
  precision_->setCurrentText(QString::fromStdString(r.precision));
  grad_reduce_->setCurrentText(QString::fromStdString(r.grad_reduce));
  moe_aux_->setValue(r.moe_aux_loss_coeff < 0 ? -1 : r.moe_aux_loss_coeff);
  moe_z_->setValue(r.moe_z_loss_coeff);
  moe_capacity_->setValue(r.moe_capacity_factor < 0 ? 0 : r.moe_capacity_factor);
  for (QDoubleSpinBox* d : {moe_aux_, moe_z_, moe_capacity_}) d->setEnabled(session_.model().is_moe());
  framework_->setCurrentText(r.framework.empty() ? QString("(Loom)") : QString::fromStdString(r.framework));
  // The loaded profile's kernels: the one it prices by default first.
  const AcceleratorSpec& acc = session_.hw().accel;
  attention_kernel_->clear();
  attention_kernel_->addItem(acc.attention_kernel.empty() ? QString("(profile's)")
                                                          : QString::fromStdString(acc.attention_kernel));
  for (const auto& [name, k] : acc.attention_kernels) attention_kernel_->addItem(QString::fromStdString(name));
  attention_kernel_->setEnabled(attention_kernel_->count() > 1);
  if (!r.attention_kernel.empty()) attention_kernel_->setCurrentText(QString::fromStdString(r.attention_kernel));
  tp_overlap_->setCurrentText(!r.tp_comm_overlap ? QString("off")
                              : r.tp_comm_overlap_cfg.empty() ? QString("te2_defaults")
                                                              : QString::fromStdString(r.tp_comm_overlap_cfg));
  dp_->setValue(l.dp);
  tp_->setValue(l.tp);
  pp_->setValue(l.pp);
  ep_->setValue(l.ep);
  etp_->setValue(l.folded_experts() ? l.etp : 0);
  cp_->setValue(l.cp);
  cp_comm_->setCurrentText(QString::fromStdString(cp_comm_name(l.cp_comm)));
  cp_comm_->setEnabled(l.cp > 1);
  micro_->setValue(l.micro_batch);
  v_->setValue(l.virtual_stages);
  zero_->setCurrentIndex(l.zero);
  schedule_->setCurrentText(QString::fromStdString(schedule_name(l.schedule)));
  recompute_->setCurrentText(QString::fromStdString(recompute_name(l.recompute)));
  recompute_layers_->setValue(l.recompute_layers);
  recompute_layers_->setEnabled(l.recompute == Recompute::kFull);
  sp_->setChecked(l.sequence_parallel);
  overlap_grad_->setChecked(l.overlap_grad_reduce);
  overlap_param_->setChecked(l.overlap_param_gather);
  updating_ = false;
}

void MainWindow::read_controls() {
  PlanRequest& r = session_.request();
  Layout& l = session_.layout();
  r.gpus = gpus_->value();
  r.global_batch = batch_->value();
  r.seq = seq_->value();
  r.precision = precision_->currentText().toStdString();
  r.grad_reduce = grad_reduce_->currentText().toStdString();
  r.moe_aux_loss_coeff = moe_aux_->value() < 0 ? -1 : moe_aux_->value();
  r.moe_z_loss_coeff = moe_z_->value();
  r.moe_capacity_factor = moe_capacity_->value() > 0 ? moe_capacity_->value() : -1;
  r.framework = framework_->currentIndex() == 0 ? std::string() : framework_->currentText().toStdString();
  r.attention_kernel = attention_kernel_->currentIndex() <= 0 ? std::string() : attention_kernel_->currentText().toStdString();
  r.tp_comm_overlap = tp_overlap_->currentIndex() != 0;
  r.tp_comm_overlap_cfg = r.tp_comm_overlap ? tp_overlap_->currentText().toStdString() : std::string();
  l.dp = dp_->value();
  l.tp = tp_->value();
  l.pp = pp_->value();
  l.ep = ep_->value();
  l.etp = etp_->value();
  l.cp = cp_->value();
  // The exchange means something under CP only (validate_layout refuses it without).
  if (auto c = parse_cp_comm(cp_comm_->currentText().toStdString()); c.is_ok()) l.cp_comm = l.cp > 1 ? *c : CpComm::kP2p;
  cp_comm_->setEnabled(l.cp > 1);
  l.micro_batch = micro_->value();
  l.virtual_stages = v_->value();
  l.zero = zero_->currentIndex();
  if (auto s = parse_schedule(schedule_->currentText().toStdString()); s.is_ok()) l.schedule = *s;
  // DualPipeV always holds two chunks a stage (as the layout text's default).
  if (l.schedule == Schedule::kDualPipeV && l.virtual_stages == 1) l.virtual_stages = 2;
  if (auto rc = parse_recompute(recompute_->currentText().toStdString()); rc.is_ok()) l.recompute = *rc;
  // A count of recomputed layers means something under full recompute only.
  l.recompute_layers = l.recompute == Recompute::kFull ? recompute_layers_->value() : 0;
  recompute_layers_->setEnabled(l.recompute == Recompute::kFull);
  l.sequence_parallel = sp_->isChecked();
  l.overlap_grad_reduce = overlap_grad_->isChecked();
  l.overlap_param_gather = overlap_param_->isChecked();
}

void MainWindow::reevaluate() {
  Status s = session_.evaluate();
  const SimResult* r = session_.result() ? &*session_.result() : nullptr;
  if (!s.is_ok()) {
    // Impossible choices are explained, not disabled: the message names the
    // field and the fix (core/layout_validate.cc).
    status_->setText("<b>Not a valid layout:</b> " + QString::fromStdString(s.message()).toHtmlEscaped());
    status_->setStyleSheet("color: #b00020;");
  } else if (!r->memory.fits) {
    status_->setText("<b>Does not fit:</b> " + QString::fromStdString(r->memory.why_not()).toHtmlEscaped());
    status_->setStyleSheet("color: #b00020;");
  } else {
    status_->setText(QString("<b>%1</b> world %2: step %3 ms, MFU %4%, peak %5 GB per rank")
                         .arg(QString::fromStdString(session_.model().name))
                         .arg(session_.request().gpus)
                         .arg(r->figures.step_time_s * 1e3, 0, 'f', 2)
                         .arg(100 * r->figures.mfu, 0, 'f', 1)
                         .arg(r->memory.peak_bytes() / 1e9, 0, 'f', 2));
    status_->setStyleSheet("");
  }
  memory_->show_result(r);
  breakdown_->show_result(r);
  traffic_->show_result(r);
  timeline_->show_result(r);
  emit evaluated();
}

QString MainWindow::status_text() const { return status_->text(); }

void MainWindow::error(const QString& title, const QString& message) {
  if (error_sink) error_sink(title, message);
}

bool MainWindow::open_model(const QString& path) {
  if (Status s = session_.load_model(path.toStdString()); !s.is_ok()) {
    error("Cannot load the model", QString::fromStdString(s.message()));
    write_controls();  // back to the model still loaded
    return false;
  }
  write_controls();
  reevaluate();
  return true;
}

bool MainWindow::open_hw(const QString& path) {
  if (Status s = session_.load_hw(path.toStdString()); !s.is_ok()) {
    error("Cannot load the hardware profile", QString::fromStdString(s.message()));
    write_controls();
    return false;
  }
  write_controls();
  reevaluate();
  return true;
}

void MainWindow::set_layout_text(const QString& text) {
  auto l = parse_layout(text.toStdString());
  if (!l.is_ok()) {
    error("Bad layout", QString::fromStdString(l.status().message()));
    return;
  }
  session_.layout() = *l;
  write_controls();
  reevaluate();
}

void MainWindow::set_gpus(int gpus) {
  session_.request().gpus = gpus;
  write_controls();
  reevaluate();
}

void MainWindow::set_attention_kernel(const QString& name) {
  session_.request().attention_kernel = name.toStdString();
  write_controls();
  reevaluate();
}

void MainWindow::set_tp_comm_overlap(const QString& cfg) {
  session_.request().tp_comm_overlap = !cfg.isEmpty();
  session_.request().tp_comm_overlap_cfg = cfg.toStdString();
  write_controls();
  reevaluate();
}

void MainWindow::set_batch(int global_batch, int seq, const QString& precision) {
  session_.request().global_batch = global_batch;
  session_.request().seq = seq;
  session_.request().precision = precision.toStdString();
  write_controls();
  reevaluate();
}

bool MainWindow::save_plan(const QString& path) {
  auto plan = session_.plan();
  if (!plan.is_ok()) {
    error("Cannot save the plan", QString::fromStdString(plan.status().message()));
    return false;
  }
  if (Status s = loom::save_plan(*plan, path.toStdString()); !s.is_ok()) {
    error("Cannot save the plan", QString::fromStdString(s.message()));
    return false;
  }
  return true;
}

bool MainWindow::export_trace(const QString& path) {
  auto plan = session_.plan();
  if (!plan.is_ok()) {
    error("Cannot export the trace", QString::fromStdString(plan.status().message()));
    return false;
  }
  if (Status s = write_trace(predicted_trace(*session_.result(), plan->plan_hash()),
                             path.toStdString());
      !s.is_ok()) {
    error("Cannot export the trace", QString::fromStdString(s.message()));
    return false;
  }
  return true;
}

bool MainWindow::export_text(const QString& path, const QString& kind) {
  auto plan = session_.plan();
  Result<std::string> text = !plan.is_ok()          ? Result<std::string>(plan.status())
                             : kind == "megatron"   ? export_megatron_args(*plan)
                                                    : export_deepspeed_config(*plan);
  if (!text.is_ok()) {
    error("Cannot export", QString::fromStdString(text.status().message()));
    return false;
  }
  if (Status s = write_text_file(path.toStdString(), *text); !s.is_ok()) {
    error("Cannot export", QString::fromStdString(s.message()));
    return false;
  }
  return true;
}

bool MainWindow::export_view(const QString& path) {
  QWidget* w = tabs_->currentWidget();
  if (path.endsWith(".svg", Qt::CaseInsensitive)) {
    QSvgGenerator gen;
    gen.setFileName(path);
    gen.setSize(w->size());
    gen.setViewBox(QRect(QPoint(0, 0), w->size()));
    gen.setTitle("Loom: " + tabs_->tabText(tabs_->currentIndex()));
    QPainter p(&gen);
    w->render(&p);
    p.end();
    if (!QFileInfo(path).exists()) {
      error("Cannot export the view", "could not write " + path);
      return false;
    }
    return true;
  }
  if (!w->grab().save(path)) {
    error("Cannot export the view", "could not write " + path + " (use .png or .svg)");
    return false;
  }
  return true;
}

bool MainWindow::load_run_record(const QString& path) {
  auto rec = loom::load_run_record(path.toStdString());
  if (!rec.is_ok()) {
    error("Cannot load the run record", QString::fromStdString(rec.status().message()));
    return false;
  }
  return show_run_record(*rec);
}

bool MainWindow::show_run_record(const RunRecord& record) {
  const RunRecord* rec = &record;
  auto plan = session_.plan();
  if (!plan.is_ok()) {
    error("Cannot compare", QString::fromStdString(plan.status().message()));
    return false;
  }
  auto rows = compare_rows(*plan, *rec);
  if (!rows.is_ok()) {
    error("Cannot compare", QString::fromStdString(rows.status().message()) +
                                "\nSet the inputs and layout of the plan that was executed, then load its record.");
    return false;
  }
  std::vector<std::tuple<std::string, double, double>> v;
  for (const ComparisonRow& r : *rows) v.emplace_back(r.id, r.predicted, r.measured);
  measured_->show_rows(v, QString::fromStdString(rec->layout));
  tabs_->setCurrentWidget(measured_);
  return true;
}

void MainWindow::pin_current() {
  if (session_.result()) compare_->pin(*session_.result());
}

void MainWindow::start_search() {
  auto job = session_.search_job();
  if (!job.is_ok()) {
    error("Cannot search", QString::fromStdString(job.status().message()));
    return;
  }
  tabs_->setCurrentWidget(search_);
  search_->start(std::move(job).value());
}

bool MainWindow::save_screenshots(const QString& dir) {
  QDir().mkpath(dir);
  bool ok = true;
  for (int i = 0; i < tabs_->count(); ++i) {
    tabs_->setCurrentIndex(i);
    QString name = tabs_->tabText(i).toLower().replace(' ', '_');
    ok = grab().save(QDir(dir).filePath(QString("%1_%2.png").arg(i + 1).arg(name))) && ok;
  }
  return ok;
}

// In this process: `ranks` threads joined over loopback TCP
// (exec::execute_local), one compute thread each; rank 0's lines go to the
// log, and the record to the measured view. No launcher, no files but the plan.
bool MainWindow::run_locally(int ranks) {
  if (run_thread_.joinable()) {
    if (run_active_) {
      error("Already running", "a run is in progress; wait for it to finish");
      return false;
    }
    run_thread_.join();
  }
  const QString dir = QDir::temp().filePath("loom-gui-run");
  QDir().mkpath(dir);
  const QString plan = QDir(dir).filePath("plan.json");
  if (!save_plan(plan)) return false;
  exec::ExecuteOptions o;
  o.plan_path = plan.toStdString();
  o.threads = 1;
  if (session_.request().steps <= 0) o.steps = 10;  // the plan records none
  o.stop_requested = &stop_run_;
  QPointer<MainWindow> self(this);
  o.print = [self](const std::string& line) {
    QMetaObject::invokeMethod(qApp, [self, text = QString::fromStdString(line)] {
      if (self) self->log_->appendPlainText(text);
    }, Qt::QueuedConnection);
  };
  log_->clear();
  log_->appendPlainText(QString("running the plan on %1 rank(s) in this process (loopback TCP)").arg(ranks));
  qobject_cast<QDockWidget*>(log_->parentWidget())->show();
  stop_run_ = 0;
  run_active_ = true;
  run_thread_ = std::thread([self, ranks, o] {
    auto r = exec::execute_local(ranks, o);
    QMetaObject::invokeMethod(qApp, [self, r = std::move(r)] {
      if (!self) return;
      self->run_active_ = false;
      int code = 0;
      if (!r.is_ok()) {
        code = status_exit_code(r.status().code());
        self->log_->appendPlainText("failed: " + QString::fromStdString(r.status().message()));
      } else {
        self->log_->appendPlainText(QString("done: %1 step(s)").arg(r->steps_done));
        if (r->end == exec::RunEnd::kCompleted) self->show_run_record(r->record);
      }
      emit self->run_finished(code);
    }, Qt::QueuedConnection);
  });
  return true;
}

}  // namespace loom::gui
