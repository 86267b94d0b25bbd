// A training job's history (GetJobHistory: the loss curve and the validation runs) for people
// and plotting tools: a fixed-size text chart for the terminal (tsctl jobs get --curve), and for
// tsctl jobs plot the data as CSV or a standalone SVG picture. Pure functions of their inputs,
// deterministic and thread-safe; they accept any history (empty, one point, non-finite losses)
// and never fail.
#pragma once

#include <string>
#include <vector>

#include "taylorshift/v1/jobs.pb.h"

namespace ts::client {

struct ChartPoint {
  double x = 0;
  double y = 0;
};

struct TextChartOptions {
  int width = 60;   // plot columns (at least 2)
  int height = 12;  // plot rows (at least 2)
  char marker = '*';
  std::string x_name = "step";  // under the x axis, between the first and last x
};

// A scatter chart of `points` (finite ones; x and y scaled linearly to the plot's columns and
// rows). The highest y lands in the top row, the lowest in the bottom row, the smallest x in
// the first column and the largest in the last; several points in one cell show as one marker.
// The top and bottom rows are labelled with the largest and smallest y (a flat series: its one
// row, the middle one), the x axis with the first and last x. Lines end in "\n"; empty when no
// point is finite.
//
//    1.099 |*
//          | **
//          |   ***
//    0.031 |      ******
//          +-----------
//           10  step  150
std::string TextChart(const std::vector<ChartPoint>& points, const TextChartOptions& options = {});

// The history as text: a summary line and a 60 x 12 chart of the loss curve, then a summary
// line of the validation runs (best and last accuracy) and, with two runs or more, a 60 x 6
// chart of their accuracy. Says so when there is no loss curve or no validation run.
std::string HistoryText(const taylorshift::v1::GetJobHistoryResponse& history);

// The history as CSV (RFC 4180) for any plotting tool: the header
//   step,loss,learning_rate,examples_per_second,validation_loss,validation_accuracy,validation_macro_f1
// then one row per step that has a loss point, a validation run or both, in step order; the
// cells of what a step lacks are empty. Numbers have the fewest digits that read back to the
// same double ("nan" and "inf" as such).
std::string HistoryCsv(const taylorshift::v1::GetJobHistoryResponse& history);

// The history as an SVG 1.1 picture (UTF-8, no external references): the loss curve (a
// polyline, one vertex per finite loss point, on the left axis) and the validation accuracy
// (one circle per run, joined by a dashed line, on the right axis, 0 to 1) over a shared step
// axis; each axis labelled with its ends' values, and `title` (XML-escaped) at the top.
std::string HistorySvg(const taylorshift::v1::GetJobHistoryResponse& history,
                       const std::string& title);

}  // namespace ts::client
