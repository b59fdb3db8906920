// The charts of `pipelane report` as inline SVG text: line charts (several series overlaid),
// horizontal stacked bars and a timeline of boxes. No scripts, no fonts, no network: the page
// that embeds them is one self-contained file. Every element a reader may want to hide carries
// data-series="KEY" (the page's legend toggles those), and boxes and points carry a <title>
// tooltip with their values.
#pragma once
#include "trainer/report/layer.h"  // trainer/README.md: the layers
#include <string>
#include <string_view>
#include <vector>

namespace pipelane::report {

std::string escape_xml(std::string_view text);  // also safe inside HTML text and attributes

// Color i of a qualitative palette (Tableau 10), cycling.
std::string palette_color(int i);

struct Point {
  double x = 0, y = 0;
};

struct Series {
  std::string key;    // data-series (legend toggling)
  std::string name;   // tooltip
  std::string color;
  std::vector<Point> points;  // sorted by x
  bool dashed = false;
  bool markers = false;  // a circle per point (sparse series such as validation loss)
};

struct LineChart {
  std::string id;  // the <svg id>
  std::string x_label, y_label;
  std::vector<Series> series;
  bool y_from_zero = false;
  bool y_percent = false;  // values are fractions; ticks print as percent
  int width = 960, height = 300;
};
// An empty chart (no point at all) renders a box saying "no data".
std::string render_line_chart(const LineChart& chart);

struct BarSegment {
  std::string key;  // data-series
  std::string name;
  std::string color;
};
struct Bar {
  std::string label;
  std::vector<double> values;  // one per segment, >= 0
};
struct StackedBarChart {
  std::string id;
  std::string unit;  // "ms/step", "s"
  std::vector<BarSegment> segments;
  std::vector<Bar> bars;
  int width = 960;
};
std::string render_stacked_bars(const StackedBarChart& chart);

struct TimelineBox {
  double start = 0, end = 0;  // seconds from the row's origin
  std::string key;            // data-series and class
  std::string color;
  std::string tooltip;
  bool inset = false;  // drawn smaller, inside whatever lies under it (lane steps in a wait)
  bool faint = false;  // drawn lighter (waits)
};
struct TimelineRow {
  std::string label;
  std::vector<TimelineBox> boxes;  // drawn in order: later boxes on top
};
struct Timeline {
  std::string id;
  double span_s = 0;  // the time axis covers [0, span_s]
  std::vector<TimelineRow> rows;
  int width = 960;
};
std::string render_timeline(const Timeline& timeline);

// Ticks for [lo, hi]: round numbers (1, 2, 5 x 10^k), about `count` of them, covering the range.
std::vector<double> nice_ticks(double lo, double hi, int count);

}  // namespace pipelane::report
