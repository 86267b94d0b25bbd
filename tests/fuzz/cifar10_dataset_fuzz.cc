// A CIFAR-10 binary batch (model/data/dataset_readers.h: ReadCifar10Dataset: 3073-byte records,
// planar RGB to gray), read with the options the selector picks; every example is one 32×32
// image's 1024 tokens.
#include <cstdint>

#include "model/data/dataset_readers.h"
#include "tests/fuzz/dataset_checks.h"
#include "tests/fuzz/fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const ts::fuzz::Input input = ts::fuzz::SplitInput(data, size);
  const std::string path = ts::fuzz::ScratchFolder::Get().Write("data_batch_1.bin", input.bytes);
  const auto dataset = ts::ReadCifar10Dataset(path, ts::fuzz::ReadOptions(input.selector));
  if (!dataset.ok()) return 0;
  ts::fuzz::CheckDataset(*dataset);
  for (const ts::Example& example : dataset->examples) {
    if (example.tokens.size() != 1024)
      ts::fuzz::Broken("a CIFAR-10 example of other than 1024 tokens");
  }
  return 0;
}
