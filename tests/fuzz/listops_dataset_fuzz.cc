// An LRA ListOps TSV file (model/data/dataset_readers.h: ReadListOpsTsvDataset), read with the
// options the selector picks; then every source it kept through the ListOps evaluator and depth
// (model/data/listops_generator.h), which take expressions of any shape.
#include <cstdint>

#include "model/data/dataset_readers.h"
#include "model/data/listops_generator.h"
#include "tests/fuzz/dataset_checks.h"
#include "tests/fuzz/fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const ts::fuzz::Input input = ts::fuzz::SplitInput(data, size);
  const std::string path = ts::fuzz::ScratchFolder::Get().Write("train.tsv", input.bytes);
  const auto dataset = ts::ReadListOpsTsvDataset(path, ts::fuzz::ReadOptions(input.selector));
  if (!dataset.ok()) return 0;
  ts::fuzz::CheckDataset(*dataset);
  for (const ts::Example& example : dataset->examples) {
    const auto value = ts::EvaluateListOps(example.tokens);
    if (value.ok() && (*value < 0 || *value > 9)) ts::fuzz::Broken("a ListOps value outside 0-9");
    (void)ts::ListOpsDepth(example.tokens);
  }
  return 0;
}
