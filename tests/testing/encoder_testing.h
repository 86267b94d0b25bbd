// Helpers shared by the encoder, checkpoint, import and tool tests: deterministic non-trivial
// weights, fixture paths and scratch directories.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>
#include <torch/torch.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "model/data/listops_generator.h"
#include "model/networks/encoder.h"

namespace ts::testing {

// `count` ListOps examples of `min_length` to `max_length` characters, as a training job's
// `format: listops` source makes them (a test failure and no examples if generation fails).
inline Dataset ListOpsData(std::int64_t count, std::int64_t min_length, std::int64_t max_length,
                           std::uint64_t seed) {
  ListOpsGeneratorOptions options;
  options.count = count;
  options.min_length = min_length;
  options.max_length = max_length;
  options.seed = seed;
  auto data = GenerateListOpsDataset(options);
  EXPECT_TRUE(data.ok()) << data.status();
  return data.ok() ? *std::move(data) : Dataset{};
}

// Replaces every parameter with seeded random values of a scale that keeps activations O(1),
// so logits differ clearly between inputs (init values are too small to expose mistakes).
inline void RandomizeParameters(TaylorShiftEncoder& model, std::uint64_t seed) {
  torch::NoGradGuard no_grad;
  torch::manual_seed(seed);
  for (auto& item : model->named_parameters()) {
    const std::string& name = item.key();
    auto& p = item.value();
    if (name.size() >= 11 && name.compare(name.size() - 11, 11, "temperature") == 0) {
      p.uniform_(0.5, 2.5);
    } else if (name == "cls_token") {
      p.normal_(0.0, 0.5);
    } else if (name == "patch_embed.weight") {
      p.normal_(0.0, 1.0);
    } else if (p.dim() >= 2) {
      // The elements of one output row (a whole number: numel is size(0) rows of them).
      const std::int64_t row_elements = p.numel() / p.size(0);
      const auto fan_in = static_cast<double>(row_elements);
      p.normal_(0.0, 1.0 / std::sqrt(fan_in));
    } else if (name.find("norm") != std::string::npos ||
               name.find("proj.1.") != std::string::npos ||
               name.find("proj.4.") != std::string::npos ||
               name.find("proj.7.") != std::string::npos) {
      p.copy_((name.find(".weight") != std::string::npos ? 1.0 : 0.0) + 0.2 * torch::randn_like(p));
    } else {
      p.normal_(0.0, 0.2);
    }
  }
}

// `relative` under the source tree (TS_SOURCE_DIR, set by ts_add_test).
inline std::string SourcePath(const std::string& relative) {
  const char* root = std::getenv("TS_SOURCE_DIR");
  return std::string(root != nullptr ? root : ".") + "/" + relative;
}

// A fresh empty directory under the test temp dir.
inline std::string MakeScratchDir() {
  std::string pattern = ::testing::TempDir() + "/ts_test_XXXXXX";
  if (::mkdtemp(pattern.data()) == nullptr) ADD_FAILURE() << "mkdtemp failed";
  return pattern;
}

}  // namespace ts::testing
