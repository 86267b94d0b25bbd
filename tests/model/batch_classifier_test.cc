// ClassifyBatch's stop hook (model/api/stop_check.h): a batch whose callers are gone stops
// between encoder blocks, on the padded and the packed forward, with the hook's status and
// without computing the remaining blocks; a hook that never objects changes nothing. Time is a
// fake clock that each block moves on, so "the deadline passes during block k" is exact.
#include "model/networks/batch_classifier.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "model/api/stop_check.h"
#include "model/networks/encoder.h"
#include "tests/testing/encoder_testing.h"
#include "tests/testing/fake_clock.h"

namespace ts {
namespace {

constexpr std::int64_t kDepth = 4;

TaylorShiftEncoder SmallModel() {
  TaylorShiftEncoderOptions options(32, kDepth, 4, 128, 3);
  options.mlp_hidden(64);
  TaylorShiftEncoder model(options);
  ts::testing::RandomizeParameters(model, 11);
  model->eval();
  return model;
}

// A stop hook that plays the batcher's: each call is one block boundary, each block takes
// `block_time` of the fake clock, and the hook answers DEADLINE_EXCEEDED from `deadline` on.
struct DeadlineHook {
  ts::testing::FakeClock* clock;
  absl::Time deadline;
  absl::Duration block_time;
  int* calls;

  absl::Status operator()() const {
    if (*calls > 0) clock->Advance(block_time);  // the block before this boundary ran
    ++*calls;
    if (clock->Now() >= deadline)
      return absl::DeadlineExceededError("every caller's deadline passed");
    return absl::OkStatus();
  }
};

TEST(ClassifyBatchStopTest, StopsBetweenBlocksOnceTheDeadlinePasses) {
  auto model = SmallModel();
  const std::vector<std::string> documents = {std::string(100, 'a'), std::string(37, 'b')};
  const std::vector<std::string_view> views(documents.begin(), documents.end());
  for (const BatchLayout layout : {BatchLayout::kPadded, BatchLayout::kPacked}) {
    ts::testing::FakeClock clock;
    int calls = 0;
    // Blocks take 1 s; the deadline is 2.5 s away: blocks 0, 1 and 2 start in time, block 3 not.
    const DeadlineHook hook{&clock, clock.Now() + absl::Milliseconds(2500), absl::Seconds(1),
                            &calls};
    const auto result = ClassifyBatch(model, views, AttentionPath::kDirect, torch::kCPU, 0, layout,
                                      StopCheck(hook));
    ASSERT_FALSE(result.ok()) << "layout " << static_cast<int>(layout);
    EXPECT_EQ(result.status().code(), absl::StatusCode::kDeadlineExceeded) << result.status();
    EXPECT_EQ(calls, 4) << "asked before blocks 0..3, stopped before block 3";
  }
}

TEST(ClassifyBatchStopTest, AHookThatNeverObjectsIsAskedOncePerBlockAndChangesNothing) {
  auto model = SmallModel();
  const std::vector<std::string> documents = {std::string(120, 'x'), std::string(5, 'y'),
                                              std::string(64, 'z')};
  const std::vector<std::string_view> views(documents.begin(), documents.end());
  for (const AttentionPath path :
       {AttentionPath::kDirect, AttentionPath::kEfficient, AttentionPath::kSoftmax}) {
    const auto plain = ClassifyBatch(model, views, path, torch::kCPU);
    ASSERT_TRUE(plain.ok()) << plain.status();
    int calls = 0;
    const auto hooked =
        ClassifyBatch(model, views, path, torch::kCPU, 0, BatchLayout::kPadded, [&calls] {
          ++calls;
          return absl::OkStatus();
        });
    ASSERT_TRUE(hooked.ok()) << hooked.status();
    EXPECT_EQ(calls, kDepth);
    ASSERT_EQ(hooked->probabilities.size(), plain->probabilities.size());
    for (std::size_t i = 0; i < plain->probabilities.size(); ++i) {
      EXPECT_EQ(hooked->probabilities[i], plain->probabilities[i]) << AttentionPathName(path);
    }
  }
}

TEST(ClassifyBatchStopTest, ACancelledBatchStopsBeforeItsFirstBlock) {
  auto model = SmallModel();
  const std::vector<std::string_view> views = {"gone before it started"};
  int calls = 0;
  const auto result = ClassifyBatch(model, views, AttentionPath::kAuto, torch::kCPU, 0,
                                    BatchLayout::kAuto, [&calls] {
                                      ++calls;
                                      return absl::CancelledError("every caller cancelled");
                                    });
  EXPECT_EQ(result.status().code(), absl::StatusCode::kCancelled) << result.status();
  EXPECT_EQ(calls, 1);
}

}  // namespace
}  // namespace ts
