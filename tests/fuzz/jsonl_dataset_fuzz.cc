// A JSON Lines data set file (model/data/dataset_readers.h: ReadJsonLinesDataset), read with the
// options the selector picks (dataset_checks.h); a data set read OK keeps model/data/dataset.h's
// promises.
#include <cstdint>

#include "model/data/dataset_readers.h"
#include "tests/fuzz/dataset_checks.h"
#include "tests/fuzz/fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const ts::fuzz::Input input = ts::fuzz::SplitInput(data, size);
  const std::string path = ts::fuzz::ScratchFolder::Get().Write("train.jsonl", input.bytes);
  const auto dataset = ts::ReadJsonLinesDataset(path, ts::fuzz::ReadOptions(input.selector));
  if (dataset.ok()) ts::fuzz::CheckDataset(*dataset);
  return 0;
}
