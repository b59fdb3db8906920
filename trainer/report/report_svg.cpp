#include "trainer/report/report_svg.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

namespace pipelane::report {

namespace {

// Coordinates with two decimals: enough for a screen, small files.
std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", v);
  return buf;
}

// A tick label: the fewest digits that tell neighbouring ticks apart.
std::string tick_label(double v, double step, bool percent) {
  if (percent) {
    v *= 100;
    step *= 100;
  }
  if (std::fabs(v) < step * 1e-9) v = 0;
  const int decimals = step >= 1 ? 0 : std::min(6, static_cast<int>(std::ceil(-std::log10(step) - 1e-9)));
  char buf[48];
  if (std::fabs(v) >= 1e6 && !percent) std::snprintf(buf, sizeof buf, "%.3gM", v / 1e6);
  else if (std::fabs(v) >= 1e4 && !percent) std::snprintf(buf, sizeof buf, "%.4gk", v / 1e3);
  else std::snprintf(buf, sizeof buf, "%.*f%s", decimals, v, percent ? "%" : "");
  return buf;
}

std::string value_text(double v) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

// A bar's total: three significant digits are plenty next to a drawn bar.
std::string short_value(double v) {
  char buf[48];
  std::snprintf(buf, sizeof buf, std::fabs(v) >= 1000 ? "%.0f" : "%.3g", v);
  return buf;
}

// At most `limit` points, keeping the first and the last: a 100k-step run stays a light page.
std::vector<Point> thin(const std::vector<Point>& points, std::size_t limit) {
  if (points.size() <= limit) return points;
  std::vector<Point> out;
  const double stride = static_cast<double>(points.size() - 1) / static_cast<double>(limit - 1);
  for (std::size_t i = 0; i < limit; ++i)
    out.push_back(points[std::min(points.size() - 1, static_cast<std::size_t>(std::lround(i * stride)))]);
  return out;
}

std::string empty_box(const std::string& id, int width, int height, const std::string& why) {
  return "<svg id=\"" + escape_xml(id) + "\" class=\"chart empty\" width=\"" + std::to_string(width) +
         "\" height=\"" + std::to_string(height) + "\" viewBox=\"0 0 " + std::to_string(width) + " " +
         std::to_string(height) + "\" xmlns=\"http://www.w3.org/2000/svg\"><rect x=\"0.5\" y=\"0.5\" width=\"" +
         std::to_string(width - 1) + "\" height=\"" + std::to_string(height - 1) +
         "\" fill=\"none\" stroke=\"#ccc\"/><text x=\"" + std::to_string(width / 2) + "\" y=\"" +
         std::to_string(height / 2) + "\" text-anchor=\"middle\" fill=\"#888\">" + escape_xml(why) +
         "</text></svg>";
}

std::string svg_open(const std::string& id, const char* cls, int width, int height) {
  return "<svg id=\"" + escape_xml(id) + "\" class=\"" + cls + "\" width=\"" + std::to_string(width) +
         "\" height=\"" + std::to_string(height) + "\" viewBox=\"0 0 " + std::to_string(width) + " " +
         std::to_string(height) + "\" xmlns=\"http://www.w3.org/2000/svg\" role=\"img\">";
}

}  // namespace

std::string escape_xml(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string palette_color(int i) {
  static const char* const kTableau10[] = {"#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f",
                                           "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac"};
  return kTableau10[((i % 10) + 10) % 10];
}

std::vector<double> nice_ticks(double lo, double hi, int count) {
  if (!(hi > lo)) {
    const double pad = lo == 0 ? 1 : std::fabs(lo) * 0.1;
    lo -= pad;
    hi += pad;
  }
  const double raw = (hi - lo) / std::max(1, count);
  const double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  double step = magnitude;
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (m * magnitude >= raw) {
      step = m * magnitude;
      break;
    }
  std::vector<double> ticks;
  for (double t = std::floor(lo / step) * step; t <= hi + step * 0.5 && ticks.size() < 50; t += step)
    ticks.push_back(t);
  if (ticks.back() < hi) ticks.push_back(ticks.back() + step);
  return ticks;
}

std::string render_line_chart(const LineChart& chart) {
  double x0 = std::numeric_limits<double>::infinity(), x1 = -x0, y0 = x0, y1 = -x0;
  for (const Series& s : chart.series)
    for (const Point& p : s.points) {
      if (!std::isfinite(p.x) || !std::isfinite(p.y)) continue;
      x0 = std::min(x0, p.x);
      x1 = std::max(x1, p.x);
      y0 = std::min(y0, p.y);
      y1 = std::max(y1, p.y);
    }
  if (!std::isfinite(x0)) return empty_box(chart.id, chart.width, chart.height, "no data");
  if (chart.y_from_zero) y0 = std::min(0.0, y0);
  const std::vector<double> xt = nice_ticks(x0, x1, 8), yt = nice_ticks(y0, y1, 6);
  x0 = xt.front();
  x1 = xt.back();
  y0 = yt.front();
  y1 = yt.back();
  const double left = 64, right = 16, top = 12, bottom = 44;
  const double pw = chart.width - left - right, ph = chart.height - top - bottom;
  const auto X = [&](double x) { return left + (x - x0) / (x1 - x0) * pw; };
  const auto Y = [&](double y) { return top + ph - (y - y0) / (y1 - y0) * ph; };

  std::string s = svg_open(chart.id, "chart line-chart", chart.width, chart.height);
  s += "<g class=\"grid\" stroke=\"#e5e5e5\">";
  for (double t : yt) s += "<line x1=\"" + num(left) + "\" x2=\"" + num(left + pw) + "\" y1=\"" + num(Y(t)) + "\" y2=\"" + num(Y(t)) + "\"/>";
  for (double t : xt) s += "<line y1=\"" + num(top) + "\" y2=\"" + num(top + ph) + "\" x1=\"" + num(X(t)) + "\" x2=\"" + num(X(t)) + "\"/>";
  s += "</g><g class=\"axis\" font-size=\"11\" fill=\"#444\">";
  const double ystep = yt.size() > 1 ? yt[1] - yt[0] : 1, xstep = xt.size() > 1 ? xt[1] - xt[0] : 1;
  for (double t : yt)
    s += "<text x=\"" + num(left - 6) + "\" y=\"" + num(Y(t) + 4) + "\" text-anchor=\"end\">" +
         tick_label(t, ystep, chart.y_percent) + "</text>";
  for (double t : xt)
    s += "<text x=\"" + num(X(t)) + "\" y=\"" + num(top + ph + 16) + "\" text-anchor=\"middle\">" +
         tick_label(t, xstep, false) + "</text>";
  s += "<text x=\"" + num(left + pw / 2) + "\" y=\"" + num(chart.height - 6) + "\" text-anchor=\"middle\">" +
       escape_xml(chart.x_label) + "</text>";
  s += "<text transform=\"translate(14," + num(top + ph / 2) + ") rotate(-90)\" text-anchor=\"middle\">" +
       escape_xml(chart.y_label) + "</text></g>";
  s += "<rect x=\"" + num(left) + "\" y=\"" + num(top) + "\" width=\"" + num(pw) + "\" height=\"" + num(ph) +
       "\" fill=\"none\" stroke=\"#999\"/>";
  for (const Series& series : chart.series) {
    const std::vector<Point> pts = thin(series.points, 2000);
    std::string d;
    for (const Point& p : pts) {
      if (!std::isfinite(p.x) || !std::isfinite(p.y)) continue;
      d += d.empty() ? 'M' : 'L';  // (one append at a time: GCC 12 warns falsely on a + chain here)
      d += num(X(p.x));
      d += ' ';
      d += num(Y(p.y));
    }
    if (d.empty()) continue;
    s += "<g class=\"series\" data-series=\"" + escape_xml(series.key) + "\">";
    s += "<path d=\"" + d + "\" fill=\"none\" stroke=\"" + series.color + "\" stroke-width=\"1.6\"" +
         (series.dashed ? " stroke-dasharray=\"6 3\"" : "") + "><title>" + escape_xml(series.name) + "</title></path>";
    if (series.markers)
      for (const Point& p : pts) {
        if (!std::isfinite(p.x) || !std::isfinite(p.y)) continue;
        s += "<circle cx=\"" + num(X(p.x)) + "\" cy=\"" + num(Y(p.y)) + "\" r=\"3.5\" fill=\"" + series.color +
             "\"><title>" + escape_xml(series.name) + ": " + value_text(p.y) + " at " + value_text(p.x) +
             "</title></circle>";
      }
    s += "</g>";
  }
  return s + "</svg>";
}

std::string render_stacked_bars(const StackedBarChart& chart) {
  double most = 0;
  for (const Bar& b : chart.bars) {
    double total = 0;
    for (double v : b.values) total += std::max(0.0, v);
    most = std::max(most, total);
  }
  const int row = 30, top = 8, bottom = 36;
  const int height = top + bottom + row * static_cast<int>(std::max<std::size_t>(1, chart.bars.size()));
  if (chart.bars.empty() || !(most > 0)) return empty_box(chart.id, chart.width, height, "no data");
  const std::vector<double> ticks = nice_ticks(0, most, 6);
  const double left = 110, right = 70, pw = chart.width - left - right, span = ticks.back();
  const auto X = [&](double v) { return left + v / span * pw; };
  std::string s = svg_open(chart.id, "chart bar-chart", chart.width, height);
  s += "<g class=\"axis\" font-size=\"11\" fill=\"#444\">";
  const double step = ticks.size() > 1 ? ticks[1] - ticks[0] : 1;
  for (double t : ticks) {
    s += "<line x1=\"" + num(X(t)) + "\" x2=\"" + num(X(t)) + "\" y1=\"" + std::to_string(top) + "\" y2=\"" +
         std::to_string(height - bottom) + "\" stroke=\"#e5e5e5\"/>";
    s += "<text x=\"" + num(X(t)) + "\" y=\"" + std::to_string(height - bottom + 14) + "\" text-anchor=\"middle\">" +
         tick_label(t, step, false) + "</text>";
  }
  s += "<text x=\"" + num(left + pw / 2) + "\" y=\"" + std::to_string(height - 6) + "\" text-anchor=\"middle\">" +
       escape_xml(chart.unit) + "</text></g>";
  for (std::size_t i = 0; i < chart.bars.size(); ++i) {
    const Bar& bar = chart.bars[i];
    const int y = top + static_cast<int>(i) * row;
    s += "<text x=\"" + num(left - 8) + "\" y=\"" + std::to_string(y + row / 2 + 4) +
         "\" text-anchor=\"end\" font-size=\"12\">" + escape_xml(bar.label) + "</text>";
    double at = 0, total = 0;
    for (std::size_t k = 0; k < bar.values.size() && k < chart.segments.size(); ++k) {
      const double v = std::max(0.0, bar.values[k]);
      total += v;
      if (v <= 0) continue;
      const BarSegment& seg = chart.segments[k];
      s += "<rect data-series=\"" + escape_xml(seg.key) + "\" x=\"" + num(X(at)) + "\" y=\"" + std::to_string(y + 4) +
           "\" width=\"" + num(X(at + v) - X(at)) + "\" height=\"" + std::to_string(row - 8) + "\" fill=\"" +
           seg.color + "\"><title>" + escape_xml(bar.label + " " + seg.name) + ": " + value_text(v) + " " +
           escape_xml(chart.unit) + "</title></rect>";
      at += v;
    }
    s += "<text x=\"" + num(X(total) + 6) + "\" y=\"" + std::to_string(y + row / 2 + 4) +
         "\" font-size=\"11\" fill=\"#444\">" + short_value(total) + "</text>";
  }
  return s + "</svg>";
}

std::string render_timeline(const Timeline& timeline) {
  const int row = 36, top = 8, bottom = 36;
  const int height = top + bottom + row * static_cast<int>(std::max<std::size_t>(1, timeline.rows.size()));
  if (timeline.rows.empty() || !(timeline.span_s > 0))
    return empty_box(timeline.id, timeline.width, height, "no traced step");
  const std::vector<double> ticks = nice_ticks(0, timeline.span_s * 1e3, 10);
  const double left = 120, right = 16, pw = timeline.width - left - right, span_ms = ticks.back();
  const auto X = [&](double seconds) { return left + seconds * 1e3 / span_ms * pw; };
  std::string s = svg_open(timeline.id, "chart timeline", timeline.width, height);
  s += "<g class=\"axis\" font-size=\"11\" fill=\"#444\">";
  const double step = ticks.size() > 1 ? ticks[1] - ticks[0] : 1;
  for (double t : ticks) {
    s += "<line x1=\"" + num(X(t / 1e3)) + "\" x2=\"" + num(X(t / 1e3)) + "\" y1=\"" + std::to_string(top) +
         "\" y2=\"" + std::to_string(height - bottom) + "\" stroke=\"#eee\"/>";
    s += "<text x=\"" + num(X(t / 1e3)) + "\" y=\"" + std::to_string(height - bottom + 14) +
         "\" text-anchor=\"middle\">" + tick_label(t, step, false) + "</text>";
  }
  s += "<text x=\"" + num(left + pw / 2) + "\" y=\"" + std::to_string(height - 6) +
       "\" text-anchor=\"middle\">ms since the step began on that rank</text></g>";
  for (std::size_t i = 0; i < timeline.rows.size(); ++i) {
    const TimelineRow& r = timeline.rows[i];
    const int y = top + static_cast<int>(i) * row;
    s += "<g class=\"timeline-row\"><text x=\"" + num(left - 8) + "\" y=\"" + std::to_string(y + row / 2 + 4) +
         "\" text-anchor=\"end\" font-size=\"12\">" + escape_xml(r.label) + "</text>";
    s += "<rect x=\"" + num(left) + "\" y=\"" + std::to_string(y + 3) + "\" width=\"" + num(pw) + "\" height=\"" +
         std::to_string(row - 6) + "\" fill=\"#fafafa\" stroke=\"#eee\"/>";
    for (const TimelineBox& b : r.boxes) {
      const double x = X(b.start), w = std::max(0.6, X(b.end) - X(b.start));
      const int by = b.inset ? y + 11 : y + 4, bh = b.inset ? row - 22 : row - 8;
      s += "<rect class=\"box " + escape_xml(b.key) + "\" data-series=\"" + escape_xml(b.key) + "\" x=\"" + num(x) +
           "\" y=\"" + std::to_string(by) + "\" width=\"" + num(w) + "\" height=\"" + std::to_string(bh) +
           "\" fill=\"" + b.color + "\"" + (b.faint ? " fill-opacity=\"0.35\"" : "") + "><title>" +
           escape_xml(b.tooltip) + "</title></rect>";
    }
    s += "</g>";
  }
  return s + "</svg>";
}

}  // namespace pipelane::report
