#include "bench/svg.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace hearth::bench {

namespace {

std::string esc(const std::string& s) {
  std::string o;
  for (char c : s) {
    switch (c) {
      case '&': o += "&amp;"; break;
      case '<': o += "&lt;"; break;
      case '>': o += "&gt;"; break;
      case '"': o += "&quot;"; break;
      default: o += c;
    }
  }
  return o;
}

std::string num(double v) {
  char b[64];
  if (std::fabs(v) >= 100 || v == std::floor(v)) std::snprintf(b, sizeof b, "%.0f", v);
  else if (std::fabs(v) >= 1) std::snprintf(b, sizeof b, "%.1f", v);
  else std::snprintf(b, sizeof b, "%.3g", v);
  return b;
}

constexpr const char* kColors[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#17becf"};

}  // namespace

double nice_step(double max, int n) {
  if (max <= 0 || n < 1) return 1;
  const double raw = max / n;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 2.5, 5.0, 10.0})
    if (raw <= m * mag) return m * mag;
  return 10 * mag;
}

std::string render_svg(const Chart& c) {
  double xmax = 0, ymax = 0, xmin = 0;
  bool any = false;
  for (const Series& s : c.series)
    for (auto [x, y] : s.points) {
      xmin = any ? std::min(xmin, x) : x;
      xmax = any ? std::max(xmax, x) : x;
      ymax = std::max(ymax, y);
      any = true;
    }
  if (!any) return "";
  xmin = std::min(0.0, xmin);
  if (xmax <= xmin) xmax = xmin + 1;
  if (ymax <= 0) ymax = 1;
  const double xstep = nice_step(xmax - xmin, 6), ystep = nice_step(ymax * 1.05, 5);
  xmax = std::ceil(xmax / xstep) * xstep;
  ymax = std::ceil(ymax * 1.05 / ystep) * ystep;

  const double W = 720, H = 440, L = 80, R = 190, T = 50, B = 60;
  const double pw = W - L - R, ph = H - T - B;
  const auto px = [&](double x) { return L + (x - xmin) / (xmax - xmin) * pw; };
  const auto py = [&](double y) { return T + ph - y / ymax * ph; };
  char buf[512];
  std::string o;
  std::snprintf(buf, sizeof buf,
                "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" viewBox=\"0 0 %.0f %.0f\" "
                "font-family=\"sans-serif\" font-size=\"12\">\n",
                W, H, W, H);
  o += buf;
  o += "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  std::snprintf(buf, sizeof buf, "<text x=\"%.0f\" y=\"28\" font-size=\"16\" text-anchor=\"middle\">", L + pw / 2);
  o += buf + esc(c.title) + "</text>\n";
  // Grid and ticks.
  for (double y = 0; y <= ymax + ystep / 2; y += ystep) {
    std::snprintf(buf, sizeof buf,
                  "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>"
                  "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">",
                  L, py(y), L + pw, py(y), L - 6, py(y) + 4);
    o += buf + num(y) + "</text>\n";
  }
  for (double x = xmin; x <= xmax + xstep / 2; x += xstep) {
    std::snprintf(buf, sizeof buf,
                  "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#eee\"/>"
                  "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">",
                  px(x), T, px(x), T + ph, px(x), T + ph + 18);
    o += buf + num(x) + "</text>\n";
  }
  std::snprintf(buf, sizeof buf,
                "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"none\" stroke=\"#333\"/>\n", L, T, pw,
                ph);
  o += buf;
  std::snprintf(buf, sizeof buf, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">", L + pw / 2, H - 18);
  o += buf + esc(c.x_label) + "</text>\n";
  std::snprintf(buf, sizeof buf, "<text transform=\"translate(20 %.1f) rotate(-90)\" text-anchor=\"middle\">",
                T + ph / 2);
  o += buf + esc(c.y_label) + "</text>\n";
  // Series.
  for (size_t i = 0; i < c.series.size(); ++i) {
    const Series& s = c.series[i];
    const char* color = kColors[i % std::size(kColors)];
    std::vector<std::pair<double, double>> pts = s.points;
    std::sort(pts.begin(), pts.end());
    std::string poly;
    for (auto [x, y] : pts) {
      std::snprintf(buf, sizeof buf, "%.1f,%.1f ", px(x), py(y));
      poly += buf;
    }
    std::snprintf(buf, sizeof buf, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2\"%s points=\"", color,
                  s.untrusted ? " stroke-dasharray=\"6 4\"" : "");
    o += buf + poly + "\"/>\n";
    for (auto [x, y] : pts) {
      std::snprintf(buf, sizeof buf, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3.5\" fill=\"%s\"><title>", px(x), py(y),
                    color);
      o += buf + esc(s.name) + ": " + num(x) + ", " + num(y) + "</title></circle>\n";
    }
    const double ly = T + 10 + 20 * static_cast<double>(i);
    std::snprintf(buf, sizeof buf,
                  "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" stroke-width=\"2\"%s/>"
                  "<text x=\"%.1f\" y=\"%.1f\">",
                  L + pw + 15, ly, L + pw + 40, ly, color, s.untrusted ? " stroke-dasharray=\"6 4\"" : "",
                  L + pw + 46, ly + 4);
    o += buf + esc(s.name + (s.untrusted ? " (untrusted)" : "")) + "</text>\n";
  }
  o += "</svg>\n";
  return o;
}

}  // namespace hearth::bench
