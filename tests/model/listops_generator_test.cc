#include "model/data/listops_generator.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <set>

#include "absl/status/status.h"

namespace ts {
namespace {

TEST(ListOpsTest, EvaluatesHandWrittenExpressions) {
  EXPECT_EQ(EvaluateListOps("[SM 5 [MAX 3 9 ] 8 ]").value(), 2);
  EXPECT_EQ(EvaluateListOps("[MED 1 5 3 ]").value(), 3);
  EXPECT_EQ(EvaluateListOps("[MED 4 1 9 7 ]").value(), 4);  // lower median of 1 4 7 9
  EXPECT_EQ(EvaluateListOps("[FIRST 7 [MIN 2 3 ] 1 ]").value(), 7);
  EXPECT_EQ(EvaluateListOps("[LAST 7 1 [MIN 2 3 ] ]").value(), 2);
  EXPECT_EQ(EvaluateListOps("[MAX 4 3 [MIN 2 3 ] 1 0 ]").value(), 4);
  EXPECT_EQ(EvaluateListOps("[MIN 4 3 [MAX 2 9 ] ]").value(), 3);
  EXPECT_EQ(EvaluateListOps("( ( [MAX 4 ( 3 ) ) ] )").value(), 4);  // LRA parentheses
  EXPECT_EQ(EvaluateListOps("6").value(), 6);
  for (const char* bad : {"", "[MAX 1 2", "[MAX ]", "[FOO 1 ]", "[MAX 1 12 ]", "[MAX 1 ] 2", "]"}) {
    EXPECT_EQ(EvaluateListOps(bad).status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
  EXPECT_EQ(ListOpsDepth("[SM 5 [MAX 3 [MIN 1 2 ] ] 8 ]"), 3);
}

TEST(ListOpsTest, GeneratorIsDeterministicBoundedAndCoversLabels) {
  ListOpsGeneratorOptions options;
  options.count = 500;
  options.seed = 7;
  absl::StatusOr<Dataset> a = GenerateListOpsDataset(options);
  ASSERT_TRUE(a.ok()) << a.status();
  absl::StatusOr<Dataset> b = GenerateListOpsDataset(options);
  ASSERT_TRUE(b.ok()) << b.status();
  ASSERT_EQ(a->examples.size(), 500u);
  std::set<std::int64_t> labels;
  std::set<std::size_t> lengths;
  int deepest = 0;
  for (std::size_t i = 0; i < a->examples.size(); ++i) {
    const Example& e = a->examples[i];
    EXPECT_EQ(e.tokens, b->examples[i].tokens);
    EXPECT_GE(e.tokens.size(), 500u);
    EXPECT_LE(e.tokens.size(), 2000u);
    EXPECT_LE(ListOpsDepth(e.tokens), 10);
    deepest = std::max(deepest, ListOpsDepth(e.tokens));
    EXPECT_EQ(EvaluateListOps(e.tokens).value(), e.label);
    labels.insert(e.label);
    lengths.insert(e.tokens.size() / 100);
  }
  EXPECT_EQ(labels.size(), 10u);
  EXPECT_GE(lengths.size(), 10u);  // spread over the length range, not one size
  EXPECT_GE(deepest, 3);
  EXPECT_EQ(a->label_names.size(), 10u);

  options.seed = 8;
  absl::StatusOr<Dataset> c = GenerateListOpsDataset(options);
  ASSERT_TRUE(c.ok());
  EXPECT_NE(c->examples[0].tokens, a->examples[0].tokens);
}

TEST(ListOpsTest, GeneratorShortLengthsAndBadOptions) {
  ListOpsGeneratorOptions options;
  options.count = 200;
  options.min_length = 10;
  options.max_length = 40;
  absl::StatusOr<Dataset> data = GenerateListOpsDataset(options);
  ASSERT_TRUE(data.ok()) << data.status();
  for (const Example& e : data->examples) {
    EXPECT_GE(e.tokens.size(), 10u);
    EXPECT_LE(e.tokens.size(), 40u);
  }
  options.max_length = 5;
  EXPECT_EQ(GenerateListOpsDataset(options).status().code(), absl::StatusCode::kInvalidArgument);
  options = {};
  options.min_length = 0;
  EXPECT_EQ(GenerateListOpsDataset(options).status().code(), absl::StatusCode::kInvalidArgument);
  options = {};
  options.count = -1;
  EXPECT_EQ(GenerateListOpsDataset(options).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ListOpsTest, AStopRequestedWhileGeneratingEndsItBeforeTheNextExample) {
  ListOpsGeneratorOptions options;
  options.count = 1000;
  int asked = 0;
  options.stop_requested = [&asked] { return ++asked > 7; };
  absl::StatusOr<Dataset> data = GenerateListOpsDataset(options);
  EXPECT_EQ(data.status().code(), absl::StatusCode::kAborted) << data.status();
  EXPECT_EQ(data.status().message(), "stopped while generating ListOps examples, after 7 of 1000");
  EXPECT_EQ(asked, 8);
}

TEST(ListOpsTest, LabelNamesAreTheDigits) {
  EXPECT_EQ(ListOpsLabelNames(),
            (std::vector<std::string>{"0", "1", "2", "3", "4", "5", "6", "7", "8", "9"}));
}

}  // namespace
}  // namespace ts
