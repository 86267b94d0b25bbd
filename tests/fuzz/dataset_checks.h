// What the dataset-reader fuzz targets ask of a data set a reader returned: the promises of
// model/data/dataset.h (label i is label_names[i], a usable example has tokens).
#pragma once

#include <string>

#include "model/data/dataset.h"
#include "tests/fuzz/fuzz_support.h"

namespace ts::fuzz {

inline void CheckDataset(const Dataset& dataset) {
  if (dataset.examples.empty()) Broken("a data set read OK without examples");
  for (const Example& example : dataset.examples) {
    if (example.label < 0 ||
        example.label >= static_cast<std::int64_t>(dataset.label_names.size())) {
      Broken("label " + std::to_string(example.label) + " outside the " +
             std::to_string(dataset.label_names.size()) + " label names");
    }
    if (example.tokens.empty()) Broken("an example without tokens");
  }
}

// The reader options a selector byte picks: bit 0 skip_malformed, bit 1 the given labels.
inline DatasetReadOptions ReadOptions(std::uint8_t selector) {
  DatasetReadOptions options;
  options.skip_malformed = (selector & 1) != 0;
  if (selector & 2) options.labels = {"neg", "pos"};
  return options;
}

}  // namespace ts::fuzz
