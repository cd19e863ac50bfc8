// loom-gui under the offscreen platform: the views show the numbers
// `loom plan --layout ... --json` prints, a saved plan is byte-identical to
// `loom plan --out`, the search runs in the background and can be cancelled,
// bad files leave the previous state and report an error, every view renders,
// and a local run's record overlays the prediction.
#include <QDir>
#include <QFile>
#include <QImage>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QProcess>
#include <QSignalSpy>
#include <QStandardPaths>
#include <QTemporaryDir>
#include <QTimer>
#include <QtTest>
#include <cmath>

#include "core/plan.h"
#include "gui/main_window.h"

using loom::gui::MainWindow;

namespace {

QByteArray run_loom(const QStringList& args, int* code = nullptr) {
  QProcess p;
  p.start(LOOM_BINARY, args);
  p.waitForFinished(120000);
  if (code) *code = p.exitCode();
  return p.readAllStandardOutput();
}

QJsonObject loom_plan_json(const QStringList& inputs, const QString& layout) {
  int code = -1;
  QByteArray out = run_loom(QStringList{"plan"} + inputs + QStringList{"--layout", layout, "--json"}, &code);
  return QJsonDocument::fromJson(out).object();
}

bool close(double a, double b) { return std::fabs(a - b) <= 1e-9 * std::max(1.0, std::fabs(b)); }

}  // namespace

class GuiTest : public QObject {
  Q_OBJECT
  QStringList errors;

  void wire(MainWindow& w) {
    errors.clear();
    w.error_sink = [this](const QString& t, const QString& m) { errors << t + ": " + m; };
  }

  // Every view's numbers against `loom plan --json` for the same inputs.
  void check_views(MainWindow& w, const QStringList& inputs, const QString& layout) {
    QJsonObject cli = loom_plan_json(inputs, layout);
    QVERIFY2(!cli.isEmpty(), "loom plan --json printed nothing");
    // Byte-for-byte: the GUI's prediction is the text loom plan prints.
    QByteArray raw = run_loom(QStringList{"plan"} + inputs + QStringList{"--layout", layout, "--json"});
    QCOMPARE(QString::fromStdString(w.session().prediction_json()).trimmed(), QString::fromUtf8(raw).trimmed());
    // Memory view: every stage's components, in GB.
    const QJsonArray stages = cli["memory_per_stage"].toArray();
    const std::pair<const char*, const char*> comps[] = {{"weights", "weights_bytes"},
                                                         {"gradients", "grads_bytes"},
                                                         {"optimizer", "optimizer_bytes"},
                                                         {"activations", "activations_bytes"}};
    for (auto [view_key, json_key] : comps) {
      const auto& drawn = w.memory_view()->drawn_gb.at(view_key);
      QCOMPARE(int(drawn.size()), int(stages.size()));
      for (int s = 0; s < stages.size(); ++s)
        QVERIFY2(close(drawn[size_t(s)] * 1e9, stages[s].toObject()[json_key].toDouble()),
                 qPrintable(QString("%1 stage %2").arg(view_key).arg(s)));
    }
    // Step-time view: the breakdown, in ms.
    const QJsonObject b = cli["breakdown"].toObject();
    const std::pair<const char*, const char*> parts[] = {{"forward", "forward_s"},
                                                         {"backward", "backward_s"},
                                                         {"recompute", "recompute_s"},
                                                         {"pipeline bubble", "bubble_s"},
                                                         {"optimizer", "optimizer_s"},
                                                         {"DP comm (exposed)", "dp_comm_exposed_s"},
                                                         {"TP comm (exposed)", "tp_comm_exposed_s"}};
    for (auto [view_key, json_key] : parts)
      QVERIFY2(close(w.breakdown_view()->drawn_ms.at(view_key) / 1e3, b[json_key].toDouble()), view_key);
    // Traffic view: one row per collective category plus the total, each
    // category's bytes per link class, time and calls as loom plan prints them.
    QCOMPARE(w.traffic_view()->rowCount(), 6);
    const QJsonObject tr = cli["traffic_per_rank_per_step"].toObject();
    for (const char* kind : {"tp", "pp", "dp", "ep", "cp"}) {
      const QJsonObject k = tr[kind].toObject();
      const std::vector<double>& v = w.traffic_view()->drawn.at(kind);
      const char* keys[] = {"nvlink_bytes", "pcie_bytes", "network_bytes", "time_s", "calls"};
      for (int i = 0; i < 5; ++i)
        QVERIFY2(close(v[size_t(i)], k[keys[i]].toDouble()), qPrintable(QString("%1 %2").arg(kind).arg(keys[i])));
    }
    // Timeline: the view spans the simulated step and draws every op.
    QVERIFY(close(w.timeline_view()->drawn_step_s(), cli["step_time_s"].toDouble()));
    QCOMPARE(w.timeline_view()->drawn_ops(), w.session().result()->program.ops.size());
    QVERIFY(w.timeline_view()->drawn_ops() > 0);
  }

 private slots:
  void initTestCase() { QStandardPaths::setTestModeEnabled(true); }

  void views_match_loom_plan_and_follow_layout_changes() {
    MainWindow w(false);
    wire(w);
    QVERIFY(w.open_model("llama-3-8b"));
    QVERIFY(w.open_hw("dgx-h100"));
    w.set_gpus(64);
    w.set_batch(512, 4096, "bf16");
    const QStringList inputs{"--model", "llama-3-8b", "--hw", "dgx-h100", "--gpus", "64", "--global-batch", "512",
                             "--seq", "4096", "--precision", "bf16"};
    QString layout = "dp=4,tp=4,pp=4,zero=1,micro=1,schedule=interleaved,v=2,sp=1,recompute=selective";
    QElapsedTimer t;
    t.start();
    w.set_layout_text(layout);
    const qint64 ms = t.elapsed();
    QVERIFY2(ms < 100, qPrintable(QString("one layout took %1 ms to evaluate and draw").arg(ms)));
    QVERIFY(w.session().result());
    check_views(w, inputs, layout);
    layout = "dp=8,tp=8,pp=1,zero=3,micro=2,schedule=1f1b,v=1,sp=1,recompute=full";
    w.set_layout_text(layout);
    check_views(w, inputs, layout);
    // Userbuffers with a stack's settings: the same prediction as loom plan's.
    w.set_tp_comm_overlap("nemo-25.02-bf16-h100-h8192-tp4");
    check_views(w, inputs + QStringList{"--tp-comm-overlap", "--tp-comm-overlap-cfg", "nemo-25.02-bf16-h100-h8192-tp4"},
                layout);
    w.set_tp_comm_overlap("");
    // Another attention kernel of the profile's: loom plan's prediction with it.
    w.set_attention_kernel("fa2");
    check_views(w, inputs + QStringList{"--attention-kernel", "fa2"}, layout);
    w.set_attention_kernel("");
    // Context parallelism with the K/V all-gathered: the controls keep the
    // exchange, and the views are loom plan's.
    layout = "dp=4,tp=4,pp=1,cp=4,zero=1,micro=1,schedule=1f1b,v=1,sp=1,recompute=none,cp_comm=all_gather";
    w.set_layout_text(layout);
    QVERIFY(w.session().layout().cp_comm == loom::CpComm::kAllGather);
    check_views(w, inputs, layout);
    QVERIFY(errors.isEmpty());
  }

  void impossible_layouts_are_explained() {
    MainWindow w(false);
    wire(w);
    w.set_gpus(8);
    w.set_layout_text("dp=3,tp=1");
    QVERIFY2(w.status_text().contains("dp") || w.status_text().contains("world"), qPrintable(w.status_text()));
    QVERIFY(!w.session().result());
    // Does not fit: the memory view says why.
    QVERIFY(w.open_model("llama-3-70b"));
    w.set_gpus(8);
    w.set_batch(64, 8192, "bf16");
    w.set_layout_text("dp=8,tp=1,pp=1,zero=0,micro=1");
    QVERIFY(w.session().result());
    QVERIFY(!w.session().result()->memory.fits);
    QVERIFY2(w.memory_view()->verdict().startsWith("Does not fit"), qPrintable(w.memory_view()->verdict()));
    QVERIFY(!w.save_plan(QDir::temp().filePath("never.json")));
    QVERIFY(!errors.isEmpty());
  }

  void saved_plan_is_byte_identical_to_loom_plan() {
    QTemporaryDir dir;
    MainWindow w(false);
    wire(w);
    QVERIFY(w.open_model("gpt2-124m"));
    QVERIFY(w.open_hw("dgx-a100-80gb"));
    w.set_gpus(16);
    w.set_batch(128, 1024, "bf16");
    const QString layout = "dp=4,tp=2,pp=2,zero=1,micro=2,schedule=1f1b";
    w.set_layout_text(layout);
    const QString gui_path = dir.filePath("gui.json"), cli_path = dir.filePath("cli.json");
    QVERIFY(w.save_plan(gui_path));
    int code = -1;
    run_loom({"plan", "--model", "gpt2-124m", "--hw", "dgx-a100-80gb", "--gpus", "16", "--global-batch", "128", "--seq",
              "1024", "--precision", "bf16", "--layout", layout, "--out", cli_path},
             &code);
    QCOMPARE(code, 0);
    QFile a(gui_path), b(cli_path);
    QVERIFY(a.open(QIODevice::ReadOnly) && b.open(QIODevice::ReadOnly));
    const QByteArray gui_bytes = a.readAll();
    QCOMPARE(gui_bytes, b.readAll());
    // ... and through the plan reader and writer unchanged.
    auto plan = loom::load_plan(gui_path.toStdString());
    QVERIFY(plan.is_ok());
    QCOMPARE(QByteArray::fromStdString(loom::plan_to_json(*plan)), gui_bytes);
    // The other exports write their files.
    QVERIFY(w.export_trace(dir.filePath("trace.json")));
    QVERIFY(w.export_text(dir.filePath("megatron.txt"), "megatron"));
    QVERIFY(w.export_text(dir.filePath("ds.json"), "deepspeed"));
    QVERIFY(QFileInfo(dir.filePath("megatron.txt")).size() > 20);
  }

  void search_runs_in_background_and_cancels() {
    MainWindow w(false);
    wire(w);
    QVERIFY(w.open_model("deepseek-v3"));
    w.set_gpus(16384);
    w.set_batch(8192, 4096, "bf16");
    QSignalSpy done(w.search_panel(), &loom::gui::SearchPanel::search_finished);
    // Cancelled at once: start() returned with the search running in its
    // worker, and it stops early, reporting the cancellation.
    w.start_search();
    QVERIFY(w.search_panel()->running());
    w.search_panel()->cancel();
    QTRY_COMPARE_WITH_TIMEOUT(done.count(), 1, 30000);
    QCOMPARE(done.first().at(0).toBool(), true);
    QVERIFY(!w.search_panel()->running());
    // Run to the end: the event loop keeps turning (a 1 ms UI timer fires)
    // while the workers search 35k layouts.
    done.clear();
    int ticks = 0;
    QTimer ticker;
    QObject::connect(&ticker, &QTimer::timeout, [&] { ++ticks; });
    ticker.start(1);
    w.start_search();
    QTRY_COMPARE_WITH_TIMEOUT(done.count(), 1, 60000);
    ticker.stop();
    QCOMPARE(done.first().at(0).toBool(), false);
    QVERIFY2(ticks >= 3, qPrintable(QString("UI timer fired %1 times during the search").arg(ticks)));
    // A small search runs to the end and fills the table, scatter and heatmap.
    QVERIFY(w.open_model("gpt2-124m"));
    w.set_gpus(16);
    w.set_batch(64, 1024, "bf16");
    done.clear();
    w.start_search();
    QTRY_COMPARE_WITH_TIMEOUT(done.count(), 1, 60000);
    QCOMPARE(done.first().at(0).toBool(), false);
    QVERIFY(w.search_panel()->rows() > 10);
    QCOMPARE(w.scatter_view()->drawn_layouts, int(w.search_panel()->result()->ranked.size()));
    QVERIFY(w.scatter_view()->drawn_points > 0);
    QVERIFY(w.scatter_view()->drawn_points <= w.scatter_view()->drawn_layouts);
    QVERIFY(w.scatter_view()->drawn_front >= 1);
    QVERIFY(!w.heatmap_view()->best_mfu.empty());
  }

  void bad_files_show_an_error_and_keep_the_state() {
    QTemporaryDir dir;
    MainWindow w(false);
    wire(w);
    QVERIFY(w.open_model("gpt2-124m"));
    const std::string before = w.session().model().name;
    const QString bad = dir.filePath("config.json");
    QFile f(bad);
    QVERIFY(f.open(QIODevice::WriteOnly));
    f.write("{\"model_type\": \"llama\", \"hidden_size\": 4096,,}");
    f.close();
    QVERIFY(!w.open_model(bad));
    QCOMPARE(errors.size(), 1);
    QVERIFY2(errors[0].contains("line"), qPrintable(errors[0]));
    QCOMPARE(w.session().model().name, before);
    QVERIFY(w.session().result());
    QVERIFY(!w.open_hw("no-such-profile"));
    QCOMPARE(errors.size(), 2);
    QVERIFY2(errors[1].contains("no-such-profile"), qPrintable(errors[1]));
    QCOMPARE(QString::fromStdString(w.session().hw().name), QString("dgx-h100"));
    QVERIFY(w.session().result());
  }

  void every_view_renders_and_exports() {
    QTemporaryDir dir;
    MainWindow w(false);
    wire(w);
    w.resize(1200, 800);
    w.show();
    w.set_gpus(8);
    w.set_layout_text("dp=2,tp=2,pp=2,micro=1,schedule=1f1b");
    w.pin_current();
    QVERIFY(w.save_screenshots(dir.path()));
    const QStringList pngs = QDir(dir.path()).entryList({"*.png"});
    QCOMPARE(pngs.size(), w.tabs()->count());
    for (const QString& p : pngs) {
      QImage img(QDir(dir.path()).filePath(p));
      QVERIFY2(img.width() >= 1000 && img.height() >= 700, qPrintable(p));
    }
    w.tabs()->setCurrentIndex(0);
    QVERIFY(w.export_view(dir.filePath("memory.svg")));
    QFile svg(dir.filePath("memory.svg"));
    QVERIFY(svg.open(QIODevice::ReadOnly));
    QVERIFY(svg.readAll().contains("<svg"));
    QVERIFY(w.export_view(dir.filePath("memory.png")));
  }

  void local_run_overlays_measured_on_predicted() {
    QTemporaryDir dir;
    MainWindow w(false);
    wire(w);
    // A tiny GPT-2 on one CPU rank.
    QFile f(dir.filePath("tiny.json"));
    QVERIFY(f.open(QIODevice::WriteOnly));
    f.write(R"({"model_type": "gpt2", "n_layer": 2, "n_embd": 64, "n_head": 4, "vocab_size": 256, "n_positions": 64})");
    f.close();
    QVERIFY(w.open_model(f.fileName()));
    QVERIFY(w.open_hw("cpu-local"));
    w.set_gpus(1);
    w.set_batch(4, 32, "fp32");
    w.set_layout_text("dp=1,micro=2");
    QVERIFY2(w.session().result() && w.session().result()->memory.fits, qPrintable(w.status_text()));
    QSignalSpy finished(&w, &MainWindow::run_finished);
    QVERIFY(w.run_locally(1));
    QVERIFY(finished.wait(120000));
    QCOMPARE(finished.first().at(0).toInt(), 0);
    QVERIFY2(errors.isEmpty(), qPrintable(errors.join("\n")));
    QTableWidget* t = w.measured_view()->table();
    QVERIFY(t->rowCount() >= 5);
    QCOMPARE(t->item(0, 0)->text(), QString("step_time"));
    QVERIFY(t->item(0, 3)->text().endsWith("%"));
    QVERIFY(w.measured_view()->bars() >= 4);  // the time rows, predicted and measured side by side

    // Two ranks, as threads of this process over loopback TCP (no launcher).
    w.set_gpus(2);
    w.set_layout_text("dp=2,micro=2");
    QVERIFY2(w.session().result() && w.session().result()->memory.fits, qPrintable(w.status_text()));
    finished.clear();
    QVERIFY(w.run_locally(2));
    QVERIFY(finished.wait(120000));
    QCOMPARE(finished.first().at(0).toInt(), 0);
    QVERIFY2(errors.isEmpty(), qPrintable(errors.join("\n")));
    QVERIFY(w.measured_view()->table()->rowCount() >= 5);
  }
};

QTEST_MAIN(GuiTest)
#include "gui_test.moc"
