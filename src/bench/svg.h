// Line charts as standalone SVG, written by hand: one polyline with markers per
// series, linear axes from zero with round ticks, a legend; a series drawn
// dashed is labelled "(untrusted)".
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace hearth::bench {

struct Series {
  std::string name;
  std::vector<std::pair<double, double>> points;  // (x, y), drawn in x order
  bool untrusted = false;
};

struct Chart {
  std::string title, x_label, y_label;
  std::vector<Series> series;
};

// The SVG document; "" when no series has a point.
std::string render_svg(const Chart& c);

// Round tick step for a range [0, max] with about `n` ticks.
double nice_step(double max, int n);

}  // namespace hearth::bench
