// SVG plot of a regression run: predicted vs measured step time per case.
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "cli/regress.h"

namespace loom::cli {

namespace {

std::string esc(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '<') o += "&lt;";
    else if (c == '>') o += "&gt;";
    else if (c == '&') o += "&amp;";
    else if (c == '"') o += "&quot;";
    else o += c;
  }
  return o;
}

}  // namespace

std::string results_svg(const RegressResults& r) {
  const double W = 720, H = 560, L = 80, R = 200, T = 50, B = 60;  // canvas and margins
  double lo = 1e30, hi = 0;
  for (const CaseResult& c : r.cases) {
    if (!c.error.empty() || !c.figures.count("step_time")) continue;
    const Figure& f = c.figures.at("step_time");
    for (double v : {f.predicted, f.measured})
      if (v > 0) lo = std::min(lo, v), hi = std::max(hi, v);
  }
  if (!(hi > 0)) lo = 1e-3, hi = 1;
  // Whole decades (or halves of one) around the data, in milliseconds.
  double lmin = std::floor(std::log10(lo * 1e3 / 1.3) * 2) / 2, lmax = std::ceil(std::log10(hi * 1e3 * 1.3) * 2) / 2;
  if (lmax - lmin < 0.5) lmax = lmin + 0.5;
  auto X = [&](double s) { return L + (std::log10(s * 1e3) - lmin) / (lmax - lmin) * (W - L - R); };
  auto Y = [&](double s) { return H - B - (std::log10(s * 1e3) - lmin) / (lmax - lmin) * (H - T - B); };
  std::string o;
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" font-family=\"sans-serif\" "
                "font-size=\"12\">\n<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n", W, H);
  o += buf;
  std::snprintf(buf, sizeof buf, "<text x=\"%.0f\" y=\"24\" font-size=\"15\">loom regress: %s suite, predicted vs measured step time</text>\n",
                L, esc(r.suite).c_str());
  o += buf;
  std::snprintf(buf, sizeof buf, "<text x=\"%.0f\" y=\"40\" fill=\"#555\">%s, commit %s, %s</text>\n", L,
                esc(r.machine.key).c_str(), esc(r.commit).c_str(), esc(r.date).c_str());
  o += buf;
  // Axes, ticks at 1-2-5 per decade.
  std::snprintf(buf, sizeof buf, "<rect x=\"%.0f\" y=\"%.0f\" width=\"%.0f\" height=\"%.0f\" fill=\"none\" stroke=\"#333\"/>\n",
                L, T, W - L - R, H - T - B);
  o += buf;
  for (int d = int(std::floor(lmin)); d <= int(std::ceil(lmax)); ++d) {
    for (double m : {1.0, 2.0, 5.0}) {
      double ms = m * std::pow(10.0, d), lg = std::log10(ms);
      if (lg < lmin - 1e-9 || lg > lmax + 1e-9) continue;
      double s = ms / 1e3, x = X(s), y = Y(s);
      std::snprintf(buf, sizeof buf,
                    "<line x1=\"%.1f\" y1=\"%.0f\" x2=\"%.1f\" y2=\"%.0f\" stroke=\"#ddd\"/>"
                    "<line x1=\"%.0f\" y1=\"%.1f\" x2=\"%.0f\" y2=\"%.1f\" stroke=\"#ddd\"/>"
                    "<text x=\"%.1f\" y=\"%.0f\" text-anchor=\"middle\">%g</text>"
                    "<text x=\"%.0f\" y=\"%.1f\" text-anchor=\"end\">%g</text>\n",
                    x, T, x, H - B, L, y, W - R, y, x, H - B + 16, ms, L - 6, y + 4, ms);
      o += buf;
    }
  }
  std::snprintf(buf, sizeof buf,
                "<text x=\"%.0f\" y=\"%.0f\" text-anchor=\"middle\">predicted step time (ms)</text>\n"
                "<text transform=\"translate(20 %.0f) rotate(-90)\" text-anchor=\"middle\">measured step time (ms, median)</text>\n",
                L + (W - L - R) / 2, H - 18, T + (H - T - B) / 2);
  o += buf;
  // y = x and the widest step-time tolerance band of the suite.
  double tol = 0;
  for (const CaseResult& c : r.cases)
    if (c.tolerances.count("step_time")) tol = std::max(tol, c.tolerances.at("step_time"));
  double a = std::pow(10.0, lmin) / 1e3, b = std::pow(10.0, lmax) / 1e3;
  auto line = [&](double f, const char* style) {
    std::snprintf(buf, sizeof buf, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" %s/>\n", X(a), Y(a * f), X(b),
                  Y(b * f), style);
    o += buf;
  };
  o += "<clipPath id=\"plot\"><rect x=\"" + std::to_string(L) + "\" y=\"" + std::to_string(T) + "\" width=\"" +
       std::to_string(W - L - R) + "\" height=\"" + std::to_string(H - T - B) + "\"/></clipPath>\n<g clip-path=\"url(#plot)\">\n";
  line(1.0, "stroke=\"#333\"");
  if (tol > 0) {
    line(1 + tol, "stroke=\"#999\" stroke-dasharray=\"5,4\"");
    line(1 - tol, "stroke=\"#999\" stroke-dasharray=\"5,4\"");
  }
  o += "</g>\n";
  int legend = 0;
  for (const CaseResult& c : r.cases) {
    if (!c.error.empty() || !c.figures.count("step_time")) continue;
    const Figure& f = c.figures.at("step_time");
    double t = c.tolerances.count("step_time") ? c.tolerances.at("step_time") : tol;
    bool ok = t <= 0 || std::fabs(f.rel_error()) <= t;
    const char* color = ok ? "#1a7f37" : "#cf222e";
    std::snprintf(buf, sizeof buf,
                  "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"5\" fill=\"%s\"/><text x=\"%.1f\" y=\"%.1f\" fill=\"%s\">%s</text>\n",
                  X(f.predicted), Y(f.measured), color, X(f.predicted) + 7, Y(f.measured) - 6, color, esc(c.name).c_str());
    o += buf;
    std::snprintf(buf, sizeof buf, "<text x=\"%.0f\" y=\"%.0f\" fill=\"%s\">%s %+.0f%% (±%.0f%%)</text>\n", W - R + 12,
                  T + 16 + 16.0 * legend++, color, esc(c.name).c_str(), 100 * f.rel_error(), 100 * t);
    o += buf;
  }
  if (tol > 0) {
    std::snprintf(buf, sizeof buf, "<text x=\"%.0f\" y=\"%.0f\" fill=\"#777\">dashed: ±%.0f%%</text>\n", W - R + 12,
                  T + 16 + 16.0 * (legend + 1), 100 * tol);
    o += buf;
  }
  o += "</svg>\n";
  return o;
}

}  // namespace loom::cli
