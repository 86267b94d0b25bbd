// The loss-curve pictures and data: the text chart puts the highest loss in its top row and the
// lowest in its bottom row, the first step in its first column and the last in its last, with
// the extremes as labels; the CSV has one row per step with the cells it lacks empty; the SVG
// is well-formed XML (checked by a small structural parser here) with one polyline vertex per
// loss point, one circle per validation run, the data's extremes on all three axes and the
// escaped title.
#include "client/job_plot.h"

#include <cmath>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ts::client {
namespace {

using taylorshift::v1::GetJobHistoryResponse;
using ::testing::HasSubstr;

std::vector<std::string> Lines(const std::string& text) {
  return absl::StrSplit(text, '\n', absl::SkipEmpty());
}

// The plot part of a chart row ("  1.5 |  *  " → "  *"): what follows the first '|'.
std::string PlotOf(const std::string& line) {
  const std::size_t bar = line.find('|');
  return bar == std::string::npos ? "" : line.substr(bar + 1);
}

GetJobHistoryResponse History(const std::vector<std::pair<int, double>>& losses,
                              const std::vector<std::pair<int, double>>& accuracies) {
  GetJobHistoryResponse history;
  for (const auto& [step, loss] : losses) {
    auto* point = history.add_loss_curve();
    point->set_step(static_cast<std::uint64_t>(step));
    point->set_loss(loss);
    point->set_learning_rate(1e-3);
  }
  for (const auto& [step, accuracy] : accuracies) {
    auto* report = history.add_validations();
    report->set_step(static_cast<std::uint64_t>(step));
    report->set_accuracy(accuracy);
  }
  return history;
}

TEST(TextChartTest, ExtremesLandOnTheEdgesWithTheirLabels) {
  // A decaying curve, steps 10..200, with its maximum at the second point.
  std::vector<ChartPoint> points;
  for (int i = 1; i <= 20; ++i) {
    points.push_back({10.0 * i, i == 2 ? 3.0 : 2.0 / i + 0.25});
  }
  const std::vector<std::string> lines = Lines(TextChart(points));
  ASSERT_EQ(lines.size(), 12u + 2u);  // 12 rows, the axis, the x labels

  // The top row holds the highest point (step 20: the second column of 60 over 10..200) and
  // is labelled with its value; the bottom row holds the lowest (the last step, last column).
  EXPECT_THAT(lines[0], ::testing::StartsWith("   3 |"));
  const std::string top = PlotOf(lines[0]);
  EXPECT_EQ(top.find('*'), static_cast<std::size_t>(std::lround(10.0 / 190.0 * 59)));
  EXPECT_EQ(top.find('*'), top.rfind('*'));  // nothing else is that high
  EXPECT_THAT(lines[11], HasSubstr("0.35 |"));
  const std::string bottom = PlotOf(lines[11]);
  ASSERT_NE(bottom.rfind('*'), std::string::npos);
  EXPECT_EQ(bottom.rfind('*'), 59u);
  // The first point (step 10, loss 2.25) is in the first column.
  bool first_column = false;
  for (int r = 0; r < 12; ++r) first_column |= PlotOf(lines[r]).find('*') == 0;
  EXPECT_TRUE(first_column);
  // Only the extremes carry labels; every row is at most label + " |" + 60 columns wide.
  for (int r = 1; r < 11; ++r) {
    EXPECT_EQ(lines[r].find_first_not_of(' '), lines[r].find('|')) << lines[r];
  }
  for (const std::string& line : lines) EXPECT_LE(line.size(), 4u + 2u + 60u) << line;
  EXPECT_THAT(lines[12], HasSubstr(" +" + std::string(60, '-')));
  // First and last step under the axis, the axis name between them.
  const std::vector<std::string> x_labels = absl::StrSplit(lines[13], ' ', absl::SkipEmpty());
  EXPECT_THAT(x_labels, ::testing::ElementsAre("10", "step", "200"));
  EXPECT_EQ(lines[13].size(), 4u + 2u + 60u);  // "200" ends under the last column
}

TEST(TextChartTest, OptionsFlatSeriesAndNonFinitePoints) {
  TextChartOptions options;
  options.width = 20;
  options.height = 5;
  options.marker = 'o';
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  const std::vector<std::string> flat =
      Lines(TextChart({{1, 0.5}, {2, nan}, {3, 0.5}, {4, inf}, {5, 0.5}}, options));
  ASSERT_EQ(flat.size(), 5u + 2u);
  // One value: its row is the middle one, and it is the only label.
  std::string expected(20, ' ');
  expected[0] = expected[10] = expected[19] = 'o';  // steps 1, 3, 5 of 1..5
  while (expected.back() == ' ') expected.pop_back();
  EXPECT_EQ(PlotOf(flat[2]), expected);
  EXPECT_THAT(flat[2], ::testing::StartsWith("0.5 |"));
  for (int r : {0, 1, 3, 4}) EXPECT_EQ(flat[r], "    |") << r;

  EXPECT_EQ(TextChart({}), "");
  EXPECT_EQ(TextChart({{1, nan}}), "");
  // A single point: first column, no last-step label.
  const std::vector<std::string> one = Lines(TextChart({{7, 1.25}}, options));
  EXPECT_EQ(PlotOf(one[2]), "o");
  const std::vector<std::string> x_labels = absl::StrSplit(one.back(), ' ', absl::SkipEmpty());
  EXPECT_THAT(x_labels, ::testing::ElementsAre("7", "step"));
}

TEST(HistoryTextTest, SummarisesTheCurveAndTheValidationRuns) {
  const GetJobHistoryResponse history =
      History({{10, 1.1}, {20, 0.7}, {30, std::nan("")}, {40, 0.3}, {50, 0.35}},
              {{25, 0.6}, {50, 0.9}, {60, 0.85}});
  const std::string text = HistoryText(history);
  EXPECT_THAT(text, HasSubstr("loss curve: 5 points, steps 10 to 50; loss 1.1 at the first, "
                              "0.35 at the last, lowest 0.3 at step 40\n"));
  EXPECT_THAT(text, HasSubstr("(1 point has a non-finite loss and is not drawn)\n"));
  EXPECT_THAT(text, HasSubstr("validation accuracy: 3 runs; best 0.9 at step 50, last 0.85 at "
                              "step 60\n"));
  const std::vector<std::string> lines = Lines(text);
  // Summary, note, 12 + 2 loss chart lines, summary, 6 + 2 accuracy chart lines.
  ASSERT_EQ(lines.size(), 2u + 14u + 1u + 8u);
  EXPECT_THAT(lines[2], HasSubstr("1.1 |*"));
  EXPECT_THAT(lines[17], HasSubstr("0.9 |"));
  EXPECT_EQ(PlotOf(lines[17]).find('o'), 42u);  // step 50 of 25..60 on 60 columns

  EXPECT_EQ(HistoryText(GetJobHistoryResponse()),
            "loss curve: no points\nvalidation accuracy: no runs\n");
  // An evaluation job: its report is the one run; no chart for one point.
  EXPECT_EQ(HistoryText(History({}, {{0, 0.75}})),
            "loss curve: no points\nvalidation accuracy: 1 run; best 0.75 at step 0, last 0.75 at "
            "step 0\n");
}

// ---------------------------------------------------------------------------------------------
// A structural XML parser, enough for the SVG: elements, attributes in double quotes, text,
// the five predefined entities, an XML declaration. Anything else is an error.

struct Element {
  std::string name;
  std::map<std::string, std::string> attributes;
  std::string text;  // the element's own character data, entities decoded
  std::vector<Element> children;

  // Every descendant (depth first) named `name` with class `css_class` (any when empty).
  void Find(const std::string& element, const std::string& css_class,
            std::vector<const Element*>& out) const {
    for (const Element& child : children) {
      if (child.name == element &&
          (css_class.empty() ||
           (child.attributes.count("class") && child.attributes.at("class") == css_class))) {
        out.push_back(&child);
      }
      child.Find(element, css_class, out);
    }
  }
  std::vector<const Element*> All(const std::string& element,
                                  const std::string& css_class = "") const {
    std::vector<const Element*> out;
    Find(element, css_class, out);
    return out;
  }
};

class XmlParser {
 public:
  explicit XmlParser(absl::string_view text) : text_(text) {}

  absl::StatusOr<Element> Document() {
    if (text_.substr(0, 5) == "<?xml") {
      const std::size_t end = text_.find("?>");
      if (end == absl::string_view::npos) return Error("unterminated XML declaration");
      pos_ = end + 2;
    }
    SkipSpace();
    absl::StatusOr<Element> root = ParseElement(0);
    if (!root.ok()) return root;
    SkipSpace();
    if (pos_ != text_.size()) return Error("content after the root element");
    return root;
  }

 private:
  absl::Status Error(absl::string_view what) const {
    return absl::InvalidArgumentError(absl::StrCat(what, " at byte ", pos_));
  }
  void SkipSpace() {
    while (pos_ < text_.size() && absl::ascii_isspace(static_cast<unsigned char>(text_[pos_]))) {
      ++pos_;
    }
  }
  std::string Name() {
    const std::size_t start = pos_;
    while (pos_ < text_.size() &&
           (absl::ascii_isalnum(static_cast<unsigned char>(text_[pos_])) || text_[pos_] == '-' ||
            text_[pos_] == '_' || text_[pos_] == ':')) {
      ++pos_;
    }
    return std::string(text_.substr(start, pos_ - start));
  }
  // Character data up to `stop`, with entities decoded; '<' or a bare '&' is an error.
  absl::StatusOr<std::string> Chars(char stop) {
    std::string out;
    while (pos_ < text_.size() && text_[pos_] != stop) {
      const char c = text_[pos_];
      if (c == '<') return Error("'<' in character data");
      if (c == '&') {
        static const std::map<std::string, char> kEntities = {
            {"amp", '&'}, {"lt", '<'}, {"gt", '>'}, {"quot", '"'}, {"apos", '\''}};
        const std::size_t semicolon = text_.find(';', pos_);
        if (semicolon == absl::string_view::npos) return Error("bare '&'");
        const auto it = kEntities.find(std::string(text_.substr(pos_ + 1, semicolon - pos_ - 1)));
        if (it == kEntities.end()) return Error("unknown entity");
        out += it->second;
        pos_ = semicolon + 1;
        continue;
      }
      out += c;
      ++pos_;
    }
    return out;
  }
  absl::StatusOr<Element> ParseElement(int depth) {
    if (depth > 32) return Error("nesting too deep");
    if (pos_ >= text_.size() || text_[pos_] != '<') return Error("expected '<'");
    ++pos_;
    Element element;
    element.name = Name();
    if (element.name.empty()) return Error("expected an element name");
    while (true) {
      SkipSpace();
      if (pos_ >= text_.size()) return Error("unterminated start tag");
      if (text_.substr(pos_, 2) == "/>") {
        pos_ += 2;
        return element;
      }
      if (text_[pos_] == '>') {
        ++pos_;
        break;
      }
      const std::string attribute = Name();
      if (attribute.empty() || text_.substr(pos_, 2) != "=\"") return Error("bad attribute");
      pos_ += 2;
      absl::StatusOr<std::string> value = Chars('"');
      if (!value.ok()) return value.status();
      if (pos_ >= text_.size()) return Error("unterminated attribute value");
      ++pos_;
      if (!element.attributes.emplace(attribute, *value).second) {
        return Error("duplicate attribute");
      }
    }
    while (true) {
      absl::StatusOr<std::string> text = Chars('<');
      if (!text.ok()) return text.status();
      element.text += *text;
      if (pos_ >= text_.size()) return Error("unterminated element " + element.name);
      if (text_.substr(pos_, 2) == "</") {
        pos_ += 2;
        if (Name() != element.name || pos_ >= text_.size() || text_[pos_] != '>') {
          return Error("mismatched end tag for " + element.name);
        }
        ++pos_;
        return element;
      }
      absl::StatusOr<Element> child = ParseElement(depth + 1);
      if (!child.ok()) return child.status();
      element.children.push_back(*std::move(child));
    }
  }

  absl::string_view text_;
  std::size_t pos_ = 0;
};

absl::StatusOr<Element> ParseXml(const std::string& text) { return XmlParser(text).Document(); }

TEST(XmlParserTest, RejectsWhatIsNotWellFormed) {
  EXPECT_TRUE(ParseXml(R"(<?xml version="1.0"?><a x="1"><b/>t &amp; u</a>)").ok());
  EXPECT_FALSE(ParseXml("<a><b></a></b>").ok());
  EXPECT_FALSE(ParseXml("<a>1 < 2</a>").ok());
  EXPECT_FALSE(ParseXml("<a>R&D</a>").ok());
  EXPECT_FALSE(ParseXml(R"(<a x="1" x="2"/>)").ok());
  EXPECT_FALSE(ParseXml("<a></a><b/>").ok());
}

// "x1,y1 x2,y2 …" → the pairs.
std::vector<std::pair<double, double>> Points(const std::string& attribute) {
  std::vector<std::pair<double, double>> out;
  for (absl::string_view pair : absl::StrSplit(attribute, ' ', absl::SkipEmpty())) {
    const std::vector<absl::string_view> xy = absl::StrSplit(pair, ',');
    double x = 0, y = 0;
    EXPECT_EQ(xy.size(), 2u) << pair;
    if (xy.size() != 2 || !absl::SimpleAtod(xy[0], &x) || !absl::SimpleAtod(xy[1], &y)) {
      ADD_FAILURE() << "bad point " << pair;
      continue;
    }
    out.emplace_back(x, y);
  }
  return out;
}

// The numeric labels, left to right (then top to bottom), in `color`.
std::vector<double> Labels(const Element& svg, const std::string& color) {
  std::vector<double> values;
  for (const Element* text : svg.All("text", "label")) {
    if (text->attributes.count("fill") ? text->attributes.at("fill") != color : !color.empty()) {
      continue;
    }
    double value = 0;
    EXPECT_TRUE(absl::SimpleAtod(text->text, &value)) << text->text;
    values.push_back(value);
  }
  return values;
}

TEST(HistoryCsvTest, OneRowPerStepWithWhatTheStepHas) {
  GetJobHistoryResponse history =
      History({{10, 2.5}, {20, 0.1}, {30, std::numeric_limits<double>::quiet_NaN()}},
              {{20, 0.875}, {25, 0.5}});
  history.mutable_loss_curve(0)->set_examples_per_second(600);
  history.mutable_validations(0)->set_loss(0.25);
  history.mutable_validations(0)->set_macro_f1(0.8);
  EXPECT_EQ(HistoryCsv(history),
            "step,loss,learning_rate,examples_per_second,validation_loss,validation_accuracy,"
            "validation_macro_f1\n"
            "10,2.5,0.001,600,,,\n"
            "20,0.1,0.001,0,0.25,0.875,0.8\n"
            "25,,,,0,0.5,0\n"
            "30,nan,0.001,0,,,\n");
  EXPECT_EQ(HistoryCsv(GetJobHistoryResponse()),
            "step,loss,learning_rate,examples_per_second,validation_loss,validation_accuracy,"
            "validation_macro_f1\n");
}

TEST(HistorySvgTest, IsWellFormedWithOneMarkPerPointAndAxesCoveringTheData) {
  std::vector<std::pair<int, double>> losses;
  for (int step = 10; step <= 300; step += 10) {
    losses.emplace_back(step, step == 20 ? 2.5 : 2.0 * std::exp(-step / 100.0) + 0.1);
  }
  losses.emplace_back(305, std::numeric_limits<double>::infinity());  // not drawn
  const GetJobHistoryResponse history = History(losses, {{100, 0.55}, {200, 0.8}, {300, 0.875}});
  const std::string title = "job-7 R&D <tiny>: \"loss\"";
  const std::string svg = HistorySvg(history, title);

  absl::StatusOr<Element> root = ParseXml(svg);
  ASSERT_TRUE(root.ok()) << root.status() << "\n" << svg;
  EXPECT_EQ(root->name, "svg");
  EXPECT_EQ(root->attributes["xmlns"], "http://www.w3.org/2000/svg");
  // The title, escaped in the file, reads back as given: as <title> and as the visible text.
  ASSERT_EQ(root->All("title").size(), 1u);
  EXPECT_EQ(root->All("title")[0]->text, title);
  ASSERT_EQ(root->All("text", "title").size(), 1u);
  EXPECT_EQ(root->All("text", "title")[0]->text, title);

  // One vertex per finite loss point, left to right, the highest loss highest on the page.
  const auto loss_lines = root->All("polyline", "loss");
  ASSERT_EQ(loss_lines.size(), 1u);
  const auto vertices = Points(loss_lines[0]->attributes.at("points"));
  ASSERT_EQ(vertices.size(), 30u);
  for (std::size_t i = 1; i < vertices.size(); ++i) {
    EXPECT_GT(vertices[i].first, vertices[i - 1].first) << i;
  }
  std::size_t top = 0;
  for (std::size_t i = 0; i < vertices.size(); ++i) {
    if (vertices[i].second < vertices[top].second) top = i;
  }
  EXPECT_EQ(top, 1u);  // step 20, loss 2.5
  // Inside the frame.
  const Element* frame = root->All("rect", "frame").at(0);
  double left = 0, width = 0, y0 = 0, height = 0;
  ASSERT_TRUE(absl::SimpleAtod(frame->attributes.at("x"), &left));
  ASSERT_TRUE(absl::SimpleAtod(frame->attributes.at("width"), &width));
  ASSERT_TRUE(absl::SimpleAtod(frame->attributes.at("y"), &y0));
  ASSERT_TRUE(absl::SimpleAtod(frame->attributes.at("height"), &height));
  for (const auto& [x, y] : vertices) {
    EXPECT_GE(x, left);
    EXPECT_LE(x, left + width);
    EXPECT_GE(y, y0);
    EXPECT_LE(y, y0 + height);
  }

  // One circle per validation run, the best accuracy highest.
  const auto circles = root->All("circle");
  ASSERT_EQ(circles.size(), 3u);
  double y_first = 0, y_best = 0;
  ASSERT_TRUE(absl::SimpleAtod(circles[0]->attributes.at("cy"), &y_first));
  ASSERT_TRUE(absl::SimpleAtod(circles[2]->attributes.at("cy"), &y_best));
  EXPECT_LT(y_best, y_first);
  EXPECT_EQ(Points(root->All("polyline", "accuracy").at(0)->attributes.at("points")).size(), 3u);

  // Each axis labelled with the data's extremes: steps 10..300, losses 0.1..2.5 (in the loss
  // colour), accuracy 0..1 (in the accuracy colour).
  const std::string loss_color = loss_lines[0]->attributes.at("stroke");
  const std::string accuracy_color =
      root->All("polyline", "accuracy").at(0)->attributes.at("stroke");
  EXPECT_THAT(Labels(*root, ""), ::testing::ElementsAre(10, 300));
  const std::vector<double> loss_labels = Labels(*root, loss_color);
  ASSERT_EQ(loss_labels.size(), 2u);
  EXPECT_EQ(loss_labels[0], 2.5);
  EXPECT_NEAR(loss_labels[1], 2.0 * std::exp(-3.0) + 0.1, 1e-3);
  EXPECT_THAT(Labels(*root, accuracy_color), ::testing::ElementsAre(1, 0));
  std::vector<std::string> axis_names;
  for (const Element* name : root->All("text", "axis-name")) axis_names.push_back(name->text);
  EXPECT_THAT(axis_names, ::testing::ElementsAre("step", "training loss", "validation accuracy"));
}

TEST(HistorySvgTest, EmptyAndSinglePointHistoriesStillMakeADocument) {
  absl::StatusOr<Element> empty = ParseXml(HistorySvg(GetJobHistoryResponse(), "job-1 q"));
  ASSERT_TRUE(empty.ok()) << empty.status();
  EXPECT_TRUE(empty->All("polyline").empty());
  ASSERT_EQ(empty->All("text", "empty").size(), 1u);
  EXPECT_EQ(empty->All("text", "empty")[0]->text, "no history yet");

  // One run at step 0: inside the frame, on a step axis that does not go below 0.
  absl::StatusOr<Element> one = ParseXml(HistorySvg(History({}, {{0, 0.5}}), "job-2 e"));
  ASSERT_TRUE(one.ok()) << one.status();
  ASSERT_EQ(one->All("circle").size(), 1u);
  double cx = 0;
  ASSERT_TRUE(absl::SimpleAtod(one->All("circle")[0]->attributes.at("cx"), &cx));
  EXPECT_GE(cx, 80);
  EXPECT_LE(cx, 720);
  EXPECT_THAT(Labels(*one, ""), ::testing::ElementsAre(0, 1));
}

}  // namespace
}  // namespace ts::client
