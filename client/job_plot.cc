#include "client/job_plot.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
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

// A number with the fewest digits that read back to the same double (CSV cells).
std::string Exact(double value) {
  char buffer[32];
  return std::string(buffer, std::to_chars(buffer, buffer + sizeof(buffer), value).ptr);
}

std::string XmlEscaped(absl::string_view text) {
  std::string out = absl::StrReplaceAll(
      text, {{"&", "&amp;"}, {"<", "&lt;"}, {">", "&gt;"}, {"\"", "&quot;"}, {"'", "&apos;"}});
  // Control characters other than tab and newline are not allowed in XML 1.0.
  for (char& c : out) {
    if (static_cast<unsigned char>(c) < 0x20 && c != '\t' && c != '\n') c = ' ';
  }
  return out;
}

// The values an axis spans; one value (or none) widened around it, not below `floor`.
struct Range {
  double lo = 0;
  double hi = 1;
};
Range Span(const std::vector<double>& values, double floor) {
  if (values.empty()) return {};
  const auto [lo, hi] = std::minmax_element(values.begin(), values.end());
  if (*hi > *lo) return {*lo, *hi};
  const double pad = *lo == 0 ? 1 : std::abs(*lo) * 0.1;
  return {std::max(*lo - pad, floor), *hi + pad};
}

// The canvas and the plot area inside it, in SVG user units.
constexpr int kSvgWidth = 800;
constexpr int kSvgHeight = 450;
constexpr double kPlotLeft = 80;
constexpr double kPlotRight = 720;
constexpr double kPlotTop = 56;
constexpr double kPlotBottom = 390;
constexpr char kLossColor[] = "#1f77b4";
constexpr char kAccuracyColor[] = "#d62728";

void AddText(std::string* svg, double x, double y, absl::string_view attributes,
             absl::string_view text) {
  absl::StrAppendFormat(svg, "<text x=\"%.2f\" y=\"%.2f\" %s>%s</text>\n", x, y, attributes,
                        XmlEscaped(text));
}

}  // namespace

std::string TextChart(const std::vector<ChartPoint>& points, const TextChartOptions& options) {
  std::vector<ChartPoint> finite;
  for (const ChartPoint& point : points) {
    if (std::isfinite(point.x) && std::isfinite(point.y)) finite.push_back(point);
  }
  if (finite.empty()) return "";
  const int width = std::max(options.width, 2);
  const int height = std::max(options.height, 2);
  const auto [x_lo, x_hi] = std::minmax_element(
      finite.begin(), finite.end(), [](const auto& a, const auto& b) { return a.x < b.x; });
  const auto [y_lo, y_hi] = std::minmax_element(
      finite.begin(), finite.end(), [](const auto& a, const auto& b) { return a.y < b.y; });
  const double x_min = x_lo->x, x_max = x_hi->x, y_min = y_lo->y, y_max = y_hi->y;
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

std::string HistoryCsv(const GetJobHistoryResponse& history) {
  struct Row {
    const LossPoint* loss = nullptr;
    const EvaluationReport* validation = nullptr;
  };
  std::map<std::uint64_t, Row> rows;
  for (const LossPoint& point : history.loss_curve()) rows[point.step()].loss = &point;
  for (const EvaluationReport& run : history.validations()) rows[run.step()].validation = &run;
  std::string csv =
      "step,loss,learning_rate,examples_per_second,validation_loss,validation_accuracy,"
      "validation_macro_f1\n";
  for (const auto& [step, row] : rows) {
    absl::StrAppend(&csv, step);
    if (row.loss == nullptr) {
      csv += ",,,";
    } else {
      absl::StrAppend(&csv, ",", Exact(row.loss->loss()), ",", Exact(row.loss->learning_rate()),
                      ",", Exact(row.loss->examples_per_second()));
    }
    if (row.validation == nullptr) {
      csv += ",,,";
    } else {
      absl::StrAppend(&csv, ",", Exact(row.validation->loss()), ",",
                      Exact(row.validation->accuracy()), ",", Exact(row.validation->macro_f1()));
    }
    csv += "\n";
  }
  return csv;
}

std::string HistorySvg(const GetJobHistoryResponse& history, const std::string& title) {
  const std::vector<ChartPoint> losses = LossPoints(history);
  const std::vector<ChartPoint> accuracies = AccuracyPoints(history);
  // One step axis for both series, the finite losses on the left axis, accuracy 0 to 1 on the
  // right one.
  std::vector<double> step_values, loss_values;
  for (const ChartPoint& point : losses) {
    step_values.push_back(point.x);
    loss_values.push_back(point.y);
  }
  for (const ChartPoint& point : accuracies) step_values.push_back(point.x);
  const Range steps = Span(step_values, 0),
              loss = Span(loss_values, -std::numeric_limits<double>::infinity()), accuracy;
  const auto x = [&](double step) {
    return kPlotLeft + (step - steps.lo) / (steps.hi - steps.lo) * (kPlotRight - kPlotLeft);
  };
  const auto y = [](double value, const Range& axis) {
    return kPlotBottom - (value - axis.lo) / (axis.hi - axis.lo) * (kPlotBottom - kPlotTop);
  };

  std::string svg = absl::StrFormat(
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
      "<svg xmlns=\"http://www.w3.org/2000/svg\" version=\"1.1\" width=\"%d\" height=\"%d\" "
      "font-family=\"sans-serif\" font-size=\"12\">\n<title>%s</title>\n"
      "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n"
      "<rect class=\"frame\" x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" height=\"%.2f\" fill=\"none\" "
      "stroke=\"black\"/>\n",
      kSvgWidth, kSvgHeight, XmlEscaped(title), kPlotLeft, kPlotTop, kPlotRight - kPlotLeft,
      kPlotBottom - kPlotTop);
  AddText(&svg, kSvgWidth / 2.0, 24, "class=\"title\" text-anchor=\"middle\" font-size=\"16\"",
          title);
  // Each axis: its name and the values at its ends (the step axis below, the loss axis left,
  // accuracy right, each in its series' colour).
  const std::string loss_style = absl::StrCat(" fill=\"", kLossColor, "\"");
  const std::string accuracy_style = absl::StrCat(" fill=\"", kAccuracyColor, "\"");
  AddText(&svg, (kPlotLeft + kPlotRight) / 2, kPlotBottom + 18,
          "class=\"axis-name\" text-anchor=\"middle\"", "step");
  AddText(&svg, kPlotLeft, kPlotTop - 8, "class=\"axis-name\"" + loss_style, "training loss");
  AddText(&svg, kPlotRight, kPlotTop - 8,
          "class=\"axis-name\" text-anchor=\"end\"" + accuracy_style, "validation accuracy");
  const std::string label = "class=\"label\"", end = "class=\"label\" text-anchor=\"end\"";
  AddText(&svg, kPlotLeft, kPlotBottom + 18, label, Significant(steps.lo, 10));
  AddText(&svg, kPlotRight, kPlotBottom + 18, end, Significant(steps.hi, 10));
  AddText(&svg, kPlotLeft - 6, kPlotTop + 4, end + loss_style, Significant(loss.hi, 4));
  AddText(&svg, kPlotLeft - 6, kPlotBottom, end + loss_style, Significant(loss.lo, 4));
  AddText(&svg, kPlotRight + 6, kPlotTop + 4, label + accuracy_style, "1");
  AddText(&svg, kPlotRight + 6, kPlotBottom, label + accuracy_style, "0");

  const auto polyline = [&](const char* css_class, const char* color, const char* dashes,
                            const std::vector<ChartPoint>& points, const Range& axis) {
    absl::StrAppendFormat(&svg,
                          "<polyline class=\"%s\" fill=\"none\" stroke=\"%s\" "
                          "stroke-width=\"1.5\" stroke-dasharray=\"%s\" points=\"",
                          css_class, color, dashes);
    for (std::size_t i = 0; i < points.size(); ++i) {
      absl::StrAppendFormat(&svg, "%s%.2f,%.2f", i == 0 ? "" : " ", x(points[i].x),
                            y(points[i].y, axis));
    }
    svg += "\"/>\n";
  };
  if (!losses.empty()) polyline("loss", kLossColor, "none", losses, loss);
  if (!accuracies.empty()) polyline("accuracy", kAccuracyColor, "5 3", accuracies, accuracy);
  for (const ChartPoint& point : accuracies) {
    absl::StrAppendFormat(&svg, "<circle cx=\"%.2f\" cy=\"%.2f\" r=\"3.5\" fill=\"%s\"/>\n",
                          x(point.x), y(point.y, accuracy), kAccuracyColor);
  }
  if (losses.empty() && accuracies.empty()) {
    AddText(&svg, (kPlotLeft + kPlotRight) / 2, (kPlotTop + kPlotBottom) / 2,
            "class=\"empty\" text-anchor=\"middle\" fill=\"#888888\"", "no history yet");
  }
  return svg + "</svg>\n";
}

}  // namespace ts::client
