#include "client/job_plot.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"

namespace ts::client {
namespace {

using taylorshift::v1::EvaluationReport;
using taylorshift::v1::GetJobHistoryResponse;
using taylorshift::v1::LossPoint;

// A number for people: `digits` significant digits ("0.03123", "150", "1.2e-05").
std::string Significant(double value, int digits) { return absl::StrFormat("%.*g", digits, value); }

std::vector<ChartPoint> LossPoints(const GetJobHistoryResponse& history) {
  std::vector<ChartPoint> points;
  for (const LossPoint& point : history.loss_curve()) {
    if (std::isfinite(point.loss())) {
      points.push_back({static_cast<double>(point.step()), point.loss()});
    }
  }
  return points;
}

std::vector<ChartPoint> AccuracyPoints(const GetJobHistoryResponse& history) {
  std::vector<ChartPoint> points;
  for (const EvaluationReport& report : history.validations()) {
    if (std::isfinite(report.accuracy())) {
      points.push_back({static_cast<double>(report.step()), report.accuracy()});
    }
  }
  return points;
}

std::string RightTrimmed(std::string line) {
  line.erase(line.find_last_not_of(' ') + 1);
  return line;
}

// ---------------------------------------------------------------------------------------------
// SVG

// A linear axis: [lo, hi] widened to whole multiples of a 1, 2 or 5 x 10^k tick spacing.
struct Axis {
  double lo = 0;
  double hi = 1;
  std::vector<double> ticks;
};

// About `target` ticks covering [lo, hi]; `integral` keeps the spacing at 1 or more (steps).
Axis NiceAxis(double lo, double hi, int target, bool integral) {
  if (!(hi > lo)) {  // one value (or none): a unit-wide range around it
    const double pad = lo == 0 ? 1 : std::abs(lo) * 0.1;
    lo -= pad;
    hi += pad;
    if (integral) lo = std::max(lo, 0.0);
  }
  const double raw = (hi - lo) / target;
  const double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  const double normalized = raw / magnitude;
  double spacing = (normalized < 1.5 ? 1
                    : normalized < 3 ? 2
                    : normalized < 7 ? 5
                                     : 10) *
                   magnitude;
  if (integral) spacing = std::max(spacing, 1.0);
  Axis axis;
  axis.lo = std::floor(lo / spacing) * spacing;
  axis.hi = std::ceil(hi / spacing) * spacing;
  const auto count = static_cast<std::int64_t>(std::llround((axis.hi - axis.lo) / spacing));
  for (std::int64_t i = 0; i <= count; ++i) {
    axis.ticks.push_back(axis.lo + static_cast<double>(i) * spacing);
  }
  return axis;
}

std::string TickLabel(double value) {
  // Spacing error (0.30000000000000004) and a negative zero must not show.
  if (std::abs(value) < 1e-12) return "0";
  return Significant(value, 6);
}

std::string XmlEscaped(absl::string_view text) {
  std::string out;
  for (const char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&apos;";
        break;
      default:
        // Control characters other than tab and newline are not allowed in XML 1.0.
        if (static_cast<unsigned char>(c) < 0x20 && c != '\t' && c != '\n') {
          out += ' ';
        } else {
          out += c;
        }
    }
  }
  return out;
}

// The canvas and the plot area inside it, in SVG user units.
constexpr int kSvgWidth = 800;
constexpr int kSvgHeight = 450;
constexpr double kPlotLeft = 80;
constexpr double kPlotRight = 720;
constexpr double kPlotTop = 56;
constexpr double kPlotBottom = 380;
constexpr char kLossColor[] = "#1f77b4";
constexpr char kAccuracyColor[] = "#d62728";

}  // namespace

std::string TextChart(const std::vector<ChartPoint>& points, const TextChartOptions& options) {
  std::vector<ChartPoint> finite;
  for (const ChartPoint& point : points) {
    if (std::isfinite(point.x) && std::isfinite(point.y)) finite.push_back(point);
  }
  if (finite.empty()) return "";
  const int width = std::max(options.width, 2);
  const int height = std::max(options.height, 2);
  double x_min = finite[0].x, x_max = finite[0].x, y_min = finite[0].y, y_max = finite[0].y;
  for (const ChartPoint& point : finite) {
    x_min = std::min(x_min, point.x);
    x_max = std::max(x_max, point.x);
    y_min = std::min(y_min, point.y);
    y_max = std::max(y_max, point.y);
  }
  std::vector<std::string> rows(static_cast<std::size_t>(height),
                                std::string(static_cast<std::size_t>(width), ' '));
  const bool flat = !(y_max > y_min);
  for (const ChartPoint& point : finite) {
    const long column =
        x_max > x_min
            ? std::lround((point.x - x_min) / (x_max - x_min) * static_cast<double>(width - 1))
            : 0;
    const long row =
        flat ? (height - 1) / 2
             : std::lround((y_max - point.y) / (y_max - y_min) * static_cast<double>(height - 1));
    rows[static_cast<std::size_t>(row)][static_cast<std::size_t>(column)] = options.marker;
  }

  std::vector<std::string> labels(static_cast<std::size_t>(height));
  if (flat) {
    labels[static_cast<std::size_t>((height - 1) / 2)] = Significant(y_max, 4);
  } else {
    labels.front() = Significant(y_max, 4);
    labels.back() = Significant(y_min, 4);
  }
  std::size_t label_width = 0;
  for (const std::string& label : labels) label_width = std::max(label_width, label.size());

  std::string out;
  for (int r = 0; r < height; ++r) {
    const auto i = static_cast<std::size_t>(r);
    absl::StrAppend(
        &out,
        RightTrimmed(absl::StrFormat("%*s |%s", static_cast<int>(label_width), labels[i], rows[i])),
        "\n");
  }
  absl::StrAppend(&out, std::string(label_width, ' '), " +",
                  std::string(static_cast<std::size_t>(width), '-'), "\n");

  // The x labels under the first and last columns, the axis name centred between them.
  std::string axis(static_cast<std::size_t>(width), ' ');
  const std::string first = Significant(x_min, 10);
  const std::string last = x_max > x_min ? Significant(x_max, 10) : "";
  axis.replace(0, std::min(first.size(), axis.size()), first.substr(0, axis.size()));
  if (!last.empty() && first.size() + 1 + last.size() <= axis.size()) {
    axis.replace(axis.size() - last.size(), last.size(), last);
  }
  const std::size_t name_size = options.x_name.size();
  const std::size_t free_from = first.size() + 2;
  const std::size_t free_to = axis.size() - (last.empty() ? 0 : last.size() + 2);
  if (name_size > 0 && free_to > free_from && free_to - free_from >= name_size) {
    axis.replace(free_from + (free_to - free_from - name_size) / 2, name_size, options.x_name);
  }
  absl::StrAppend(&out, RightTrimmed(absl::StrCat(std::string(label_width, ' '), "  ", axis)),
                  "\n");
  return out;
}

std::string HistoryText(const GetJobHistoryResponse& history) {
  std::string out;
  const std::vector<ChartPoint> losses = LossPoints(history);
  if (history.loss_curve().empty()) {
    out += "loss curve: no points\n";
  } else {
    const LossPoint& first = history.loss_curve(0);
    const LossPoint& last = history.loss_curve(history.loss_curve_size() - 1);
    absl::StrAppend(&out, "loss curve: ", history.loss_curve_size(),
                    history.loss_curve_size() == 1 ? " point" : " points", ", steps ", first.step(),
                    " to ", last.step(), "; loss ", Significant(first.loss(), 4), " at the first, ",
                    Significant(last.loss(), 4), " at the last");
    if (!losses.empty()) {
      const ChartPoint lowest =
          *std::min_element(losses.begin(), losses.end(),
                            [](const ChartPoint& a, const ChartPoint& b) { return a.y < b.y; });
      absl::StrAppend(&out, ", lowest ", Significant(lowest.y, 4), " at step ",
                      Significant(lowest.x, 10));
    }
    out += "\n";
    const std::size_t skipped = static_cast<std::size_t>(history.loss_curve_size()) - losses.size();
    if (skipped > 0) {
      absl::StrAppend(&out, "(", skipped, skipped == 1 ? " point has" : " points have",
                      " a non-finite loss and is not drawn)\n");
    }
    out += TextChart(losses);
  }

  if (history.validations().empty()) {
    out += "validation accuracy: no runs\n";
    return out;
  }
  const EvaluationReport* best = &history.validations(0);
  for (const EvaluationReport& report : history.validations()) {
    if (report.accuracy() > best->accuracy()) best = &report;
  }
  const EvaluationReport& last = history.validations(history.validations_size() - 1);
  absl::StrAppend(&out, "validation accuracy: ", history.validations_size(),
                  history.validations_size() == 1 ? " run" : " runs", "; best ",
                  Significant(best->accuracy(), 4), " at step ", best->step(), ", last ",
                  Significant(last.accuracy(), 4), " at step ", last.step(), "\n");
  if (history.validations_size() >= 2) {
    TextChartOptions options;
    options.height = 6;
    options.marker = 'o';
    out += TextChart(AccuracyPoints(history), options);
  }
  return out;
}

std::string HistorySvg(const GetJobHistoryResponse& history, const std::string& title) {
  const std::vector<ChartPoint> losses = LossPoints(history);
  const std::vector<ChartPoint> accuracies = AccuracyPoints(history);

  // The step axis spans both series; the loss axis the finite losses; accuracy is 0 to 1.
  bool any_step = false;
  double step_min = 0, step_max = 0;
  for (const std::vector<ChartPoint>* series : {&losses, &accuracies}) {
    for (const ChartPoint& point : *series) {
      step_min = any_step ? std::min(step_min, point.x) : point.x;
      step_max = any_step ? std::max(step_max, point.x) : point.x;
      any_step = true;
    }
  }
  const Axis steps = any_step ? NiceAxis(step_min, step_max, 8, true) : NiceAxis(0, 1, 5, true);
  double loss_min = 0, loss_max = 1;
  if (!losses.empty()) {
    loss_min = loss_max = losses[0].y;
    for (const ChartPoint& point : losses) {
      loss_min = std::min(loss_min, point.y);
      loss_max = std::max(loss_max, point.y);
    }
  }
  const Axis loss = NiceAxis(loss_min, loss_max, 6, false);
  Axis accuracy;
  for (int i = 0; i <= 5; ++i) accuracy.ticks.push_back(0.2 * i);

  const auto x_of = [&](double step) {
    return kPlotLeft + (step - steps.lo) / (steps.hi - steps.lo) * (kPlotRight - kPlotLeft);
  };
  const auto y_in = [](const Axis& axis, double value) {
    return kPlotBottom - (value - axis.lo) / (axis.hi - axis.lo) * (kPlotBottom - kPlotTop);
  };
  const auto coordinate = [](double value) { return absl::StrFormat("%.2f", value); };

  std::string svg;
  absl::StrAppend(&svg, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
  absl::StrAppendFormat(&svg,
                        "<svg xmlns=\"http://www.w3.org/2000/svg\" version=\"1.1\" width=\"%d\" "
                        "height=\"%d\" viewBox=\"0 0 %d %d\" font-family=\"sans-serif\" "
                        "font-size=\"12\">\n",
                        kSvgWidth, kSvgHeight, kSvgWidth, kSvgHeight);
  const std::string escaped_title = XmlEscaped(title);
  absl::StrAppend(&svg, "<title>", escaped_title, "</title>\n");
  absl::StrAppendFormat(&svg, "<rect width=\"%d\" height=\"%d\" fill=\"white\"/>\n", kSvgWidth,
                        kSvgHeight);
  absl::StrAppendFormat(&svg,
                        "<text class=\"title\" x=\"%d\" y=\"28\" text-anchor=\"middle\" "
                        "font-size=\"16\">%s</text>\n",
                        kSvgWidth / 2, escaped_title);

  // Grid lines at the loss ticks, then the frame.
  svg += "<g class=\"grid\" stroke=\"#e6e6e6\" stroke-width=\"1\">\n";
  for (const double tick : loss.ticks) {
    const std::string y = coordinate(y_in(loss, tick));
    absl::StrAppend(&svg, "<line x1=\"", coordinate(kPlotLeft), "\" y1=\"", y, "\" x2=\"",
                    coordinate(kPlotRight), "\" y2=\"", y, "\"/>\n");
  }
  svg += "</g>\n";
  absl::StrAppendFormat(&svg,
                        "<rect class=\"frame\" x=\"%s\" y=\"%s\" width=\"%s\" height=\"%s\" "
                        "fill=\"none\" stroke=\"black\"/>\n",
                        coordinate(kPlotLeft), coordinate(kPlotTop),
                        coordinate(kPlotRight - kPlotLeft), coordinate(kPlotBottom - kPlotTop));

  // Ticks and their labels: steps below, loss on the left, accuracy on the right.
  svg += "<g class=\"step-ticks\" stroke=\"black\">\n";
  for (const double tick : steps.ticks) {
    const std::string x = coordinate(x_of(tick));
    absl::StrAppend(&svg, "<line x1=\"", x, "\" y1=\"", coordinate(kPlotBottom), "\" x2=\"", x,
                    "\" y2=\"", coordinate(kPlotBottom + 5), "\"/>\n");
    absl::StrAppend(&svg, "<text x=\"", x, "\" y=\"", coordinate(kPlotBottom + 19),
                    "\" text-anchor=\"middle\" stroke=\"none\">", TickLabel(tick), "</text>\n");
  }
  svg += "</g>\n";
  absl::StrAppend(&svg, "<g class=\"loss-ticks\" stroke=\"", kLossColor, "\" fill=\"", kLossColor,
                  "\">\n");
  for (const double tick : loss.ticks) {
    const std::string y = coordinate(y_in(loss, tick));
    absl::StrAppend(&svg, "<line x1=\"", coordinate(kPlotLeft - 5), "\" y1=\"", y, "\" x2=\"",
                    coordinate(kPlotLeft), "\" y2=\"", y, "\"/>\n");
    absl::StrAppend(&svg, "<text x=\"", coordinate(kPlotLeft - 8), "\" y=\"",
                    coordinate(y_in(loss, tick) + 4), "\" text-anchor=\"end\" stroke=\"none\">",
                    TickLabel(tick), "</text>\n");
  }
  svg += "</g>\n";
  absl::StrAppend(&svg, "<g class=\"accuracy-ticks\" stroke=\"", kAccuracyColor, "\" fill=\"",
                  kAccuracyColor, "\">\n");
  for (const double tick : accuracy.ticks) {
    const std::string y = coordinate(y_in(accuracy, tick));
    absl::StrAppend(&svg, "<line x1=\"", coordinate(kPlotRight), "\" y1=\"", y, "\" x2=\"",
                    coordinate(kPlotRight + 5), "\" y2=\"", y, "\"/>\n");
    absl::StrAppend(&svg, "<text x=\"", coordinate(kPlotRight + 8), "\" y=\"",
                    coordinate(y_in(accuracy, tick) + 4),
                    "\" text-anchor=\"start\" stroke=\"none\">", TickLabel(tick), "</text>\n");
  }
  svg += "</g>\n";

  // Axis names.
  const double middle_y = (kPlotTop + kPlotBottom) / 2;
  absl::StrAppend(&svg, "<text class=\"axis-name\" x=\"", coordinate((kPlotLeft + kPlotRight) / 2),
                  "\" y=\"", coordinate(kPlotBottom + 40),
                  "\" text-anchor=\"middle\">step</text>\n");
  absl::StrAppend(&svg, "<text class=\"axis-name\" x=\"24\" y=\"", coordinate(middle_y),
                  "\" text-anchor=\"middle\" fill=\"", kLossColor, "\" transform=\"rotate(-90 24 ",
                  coordinate(middle_y), ")\">training loss</text>\n");
  absl::StrAppend(&svg, "<text class=\"axis-name\" x=\"", kSvgWidth - 24, "\" y=\"",
                  coordinate(middle_y), "\" text-anchor=\"middle\" fill=\"", kAccuracyColor,
                  "\" transform=\"rotate(90 ", kSvgWidth - 24, " ", coordinate(middle_y),
                  ")\">validation accuracy</text>\n");

  // The series.
  if (losses.empty() && accuracies.empty()) {
    absl::StrAppend(&svg, "<text class=\"empty\" x=\"", coordinate((kPlotLeft + kPlotRight) / 2),
                    "\" y=\"", coordinate(middle_y),
                    "\" text-anchor=\"middle\" fill=\"#888888\">no history yet</text>\n");
  }
  if (!losses.empty()) {
    absl::StrAppend(&svg, "<polyline class=\"loss\" fill=\"none\" stroke=\"", kLossColor,
                    "\" stroke-width=\"1.5\" points=\"");
    for (std::size_t i = 0; i < losses.size(); ++i) {
      absl::StrAppend(&svg, i == 0 ? "" : " ", coordinate(x_of(losses[i].x)), ",",
                      coordinate(y_in(loss, losses[i].y)));
    }
    svg += "\"/>\n";
  }
  if (!accuracies.empty()) {
    absl::StrAppend(&svg, "<polyline class=\"accuracy\" fill=\"none\" stroke=\"", kAccuracyColor,
                    "\" stroke-width=\"1.5\" stroke-dasharray=\"5 3\" points=\"");
    for (std::size_t i = 0; i < accuracies.size(); ++i) {
      absl::StrAppend(&svg, i == 0 ? "" : " ", coordinate(x_of(accuracies[i].x)), ",",
                      coordinate(y_in(accuracy, accuracies[i].y)));
    }
    svg += "\"/>\n";
    absl::StrAppend(&svg, "<g class=\"accuracy-points\" fill=\"", kAccuracyColor, "\">\n");
    for (const ChartPoint& point : accuracies) {
      absl::StrAppend(&svg, "<circle cx=\"", coordinate(x_of(point.x)), "\" cy=\"",
                      coordinate(y_in(accuracy, point.y)), "\" r=\"3.5\"/>\n");
    }
    svg += "</g>\n";
  }

  // Legend, above the plot's top right corner.
  const double legend_y = kPlotTop - 12;
  absl::StrAppend(&svg, "<g class=\"legend\">\n");
  absl::StrAppend(&svg, "<line x1=\"", coordinate(kPlotRight - 250), "\" y1=\"",
                  coordinate(legend_y), "\" x2=\"", coordinate(kPlotRight - 226), "\" y2=\"",
                  coordinate(legend_y), "\" stroke=\"", kLossColor, "\" stroke-width=\"1.5\"/>\n");
  absl::StrAppend(&svg, "<text x=\"", coordinate(kPlotRight - 220), "\" y=\"",
                  coordinate(legend_y + 4), "\">training loss</text>\n");
  absl::StrAppend(&svg, "<line x1=\"", coordinate(kPlotRight - 125), "\" y1=\"",
                  coordinate(legend_y), "\" x2=\"", coordinate(kPlotRight - 101), "\" y2=\"",
                  coordinate(legend_y), "\" stroke=\"", kAccuracyColor,
                  "\" stroke-width=\"1.5\" stroke-dasharray=\"5 3\"/>\n");
  absl::StrAppend(&svg, "<text x=\"", coordinate(kPlotRight - 95), "\" y=\"",
                  coordinate(legend_y + 4), "\">validation accuracy</text>\n");
  svg += "</g>\n</svg>\n";
  return svg;
}

}  // namespace ts::client
