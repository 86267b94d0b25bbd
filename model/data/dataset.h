// A data set in memory: byte-token examples with integer labels and the labels' names, as the
// readers (model/data/dataset_readers.h) and the ListOps generator (model/data/listops_generator.h)
// make them and training consumes them; the seeded validation split. Torch-free; thread-safe (no
// shared state).
#pragma once

#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace ts {

struct Example {
  std::string tokens;  // byte tokens (a document's bytes, grayscale pixels, a ListOps string)
  std::int64_t label = 0;
};

struct Dataset {
  std::vector<Example> examples;
  std::vector<std::string> label_names;   // label i is label_names[i]
  std::int64_t skipped = 0;               // malformed records dropped (skip_malformed)
  std::vector<std::string> skip_reasons;  // the first max_skip_reasons of them, "file:line: why"
};

// Asked between the records of a read or a generation (model/data/dataset_readers.h,
// listops_generator.h): true stops it with ABORTED, so that a process asked to stop (tsworker's
// SIGTERM) need not wait for a large data set to load. Empty: never asked.
using StopRequested = std::function<bool()>;

struct DatasetSplit {
  std::vector<Example> train;
  std::vector<Example> validation;
};

// Holds out round(fraction · n) examples (at least 1, leaving at least 1) chosen by a seeded
// shuffle; both parts keep the input order. INVALID_ARGUMENT unless 0 < fraction < 1 and n ≥ 2.
absl::StatusOr<DatasetSplit> SplitDataset(std::vector<Example> examples, double fraction,
                                          std::uint64_t seed);

// Uniform integer in [lo, hi] from a 64-bit engine, by rejection — unlike
// std::uniform_int_distribution, the same on every standard library.
std::int64_t UniformInt(std::mt19937_64& rng, std::int64_t lo, std::int64_t hi);

}  // namespace ts
