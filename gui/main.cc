// loom-gui: the what-if planner. `loom-gui --screenshot DIR` renders every
// view of a representative plan to DIR/*.png and exits (works offscreen:
// QT_QPA_PLATFORM=offscreen).
#include <QApplication>
#include <QCommandLineParser>
#include <QEventLoop>
#include <QTimer>
#include <cstdio>

#include "gui/main_window.h"

int main(int argc, char** argv) {
  QApplication app(argc, argv);
  QApplication::setOrganizationName("loom");
  QApplication::setApplicationName("loom-gui");
  QCommandLineParser cli;
  cli.setApplicationDescription("Loom what-if planner");
  cli.addHelpOption();
  QCommandLineOption shot("screenshot", "render every view to DIR/*.png and exit", "DIR");
  QCommandLineOption model("model", "model (name in models/ or config.json path)", "MODEL");
  QCommandLineOption hw("hw", "hardware profile (name in hwprofiles/ or path)", "HW");
  QCommandLineOption gpus("gpus", "number of GPUs", "N");
  QCommandLineOption layout("layout", "layout, as loom plan --layout", "LAYOUT");
  QCommandLineOption batch("global-batch", "global batch (sequences)", "B");
  QCommandLineOption seq("seq", "sequence length", "S");
  QCommandLineOption precision("precision", "fp32|bf16|fp16|fp8", "P");
  QCommandLineOption record("record", "a run record to overlay (loom execute --record)", "FILE");
  cli.addOptions({shot, model, hw, gpus, layout, batch, seq, precision, record});
  cli.process(app);
  // Numbers are checked before anything uses them: a bad one is a message and
  // exit 2, never a window (or a screenshot run) left waiting on a plan that
  // cannot be made.
  auto number = [&](const QCommandLineOption& o, long long lo, long long hi, int* out) {
    if (!cli.isSet(o)) return true;
    bool parsed = false;
    const long long v = cli.value(o).toLongLong(&parsed);
    if (!parsed || v < lo || v > hi) {
      std::fprintf(stderr, "loom-gui: --%s %s: expected an integer from %lld to %lld\n", qPrintable(o.names().first()),
                   qPrintable(cli.value(o)), lo, hi);
      return false;
    }
    *out = int(v);
    return true;
  };
  int n_gpus = 0, n_batch = 0, n_seq = 0;
  if (!number(gpus, 1, 1 << 20, &n_gpus) || !number(batch, 1, 1 << 24, &n_batch) ||
      !number(seq, 1, 1 << 24, &n_seq))
    return 2;
  if (cli.isSet(precision)) {
    const QString p = cli.value(precision);
    if (p != "fp32" && p != "bf16" && p != "fp16" && p != "fp8") {
      std::fprintf(stderr, "loom-gui: --precision %s: expected fp32, bf16, fp16 or fp8\n", qPrintable(p));
      return 2;
    }
  }
  const bool screenshot = cli.isSet(shot);
  loom::gui::MainWindow w(/*remember=*/!screenshot);
  bool errors = false;
  if (screenshot) {
    w.error_sink = [&errors](const QString& t, const QString& m) {
      std::fprintf(stderr, "loom-gui: %s: %s\n", qPrintable(t), qPrintable(m));
      errors = true;
    };
  }
  bool ok = true;
  if (cli.isSet(model)) ok = w.open_model(cli.value(model)) && ok;
  if (cli.isSet(hw)) ok = w.open_hw(cli.value(hw)) && ok;
  if (cli.isSet(gpus)) w.set_gpus(n_gpus);
  if (cli.isSet(batch) || cli.isSet(seq) || cli.isSet(precision))
    w.set_batch(cli.isSet(batch) ? n_batch : int(w.session().request().global_batch),
                cli.isSet(seq) ? n_seq : int(w.session().request().seq),
                cli.isSet(precision) ? cli.value(precision) : QString::fromStdString(w.session().request().precision));
  if (cli.isSet(layout)) w.set_layout_text(cli.value(layout));
  if (cli.isSet(record)) ok = w.load_run_record(cli.value(record)) && ok;
  w.resize(1400, 860);
  w.show();
  if (!screenshot) return app.exec();
  if (!ok || errors) return 2;
  // A representative session: pin this layout and two neighbours, run the
  // search to completion, then render every tab.
  w.pin_current();
  const loom::Layout base = w.session().layout();
  if (base.pp > 1) {
    for (loom::Schedule s : {loom::Schedule::k1F1B, loom::Schedule::kGpipe}) {
      loom::Layout l = base;
      l.schedule = s;
      l.virtual_stages = 1;
      w.set_layout_text(QString::fromStdString(l.to_string()));
      w.pin_current();
    }
  }
  w.set_layout_text(QString::fromStdString(base.to_string()));
  QEventLoop loop;
  QObject::connect(w.search_panel(), &loom::gui::SearchPanel::search_finished, &loop, &QEventLoop::quit);
  w.start_search();
  if (errors) return 2;
  QTimer::singleShot(120000, &loop, &QEventLoop::quit);
  loop.exec();
  return w.save_screenshots(cli.value(shot)) ? 0 : 1;
}
