#include "worker/job_data.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "model/data/dataset_readers.h"
#include "model/data/listops_generator.h"

namespace ts::worker {
namespace pb = taylorshift::v1;

absl::StatusOr<Dataset> LoadSource(const DataRoot& root, const pb::DataSource& source,
                                   const std::vector<std::string>& labels, const std::string& field,
                                   const std::atomic<bool>* stop) {
  StopRequested stop_requested;
  if (stop != nullptr) stop_requested = [stop] { return stop->load(); };
  DatasetReadOptions read;
  read.stop_requested = stop_requested;
  read.skip_malformed = source.skip_malformed();
  read.labels = labels;
  read.confine_to = root.root();
  absl::StatusOr<Dataset> dataset;
  if (source.format() == "listops") {
    ListOpsGeneratorOptions generate;
    generate.count = static_cast<std::int64_t>(source.generate().count());
    generate.min_length = static_cast<std::int64_t>(source.generate().min_length());
    generate.max_length = static_cast<std::int64_t>(source.generate().max_length());
    generate.seed = source.generate().seed();
    generate.stop_requested = stop_requested;
    dataset = GenerateListOpsDataset(generate);
  } else {
    auto path = root.Resolve(source.path());
    if (!path.ok()) return Prefixed(path.status(), absl::StrCat(field, ".path: "));
    if (source.format() == "jsonl") {
      dataset = ReadJsonLinesDataset(*path, read);
    } else if (source.format() == "folder") {
      dataset = ReadFolderDataset(*path, read);
    } else if (source.format() == "lra_tsv") {
      dataset = ReadListOpsTsvDataset(*path, read);
    } else if (source.format() == "cifar10") {
      dataset = ReadCifar10Dataset(*path, read);
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ".format: unknown format \"", source.format().substr(0, 64), "\""));
    }
  }
  return Prefixed(std::move(dataset), absl::StrCat(field, ": "));
}

pb::EvaluationReport ToReport(const EvaluationResult& result,
                              const std::vector<std::string>& labels, std::int64_t step) {
  pb::EvaluationReport report;
  report.set_step(static_cast<std::uint64_t>(step));
  report.set_examples(static_cast<std::uint64_t>(result.examples));
  report.set_loss(result.loss);
  report.set_accuracy(result.metrics.accuracy);
  report.set_macro_f1(result.metrics.macro_f1);
  report.set_examples_per_second(result.examples_per_second);
  for (std::size_t c = 0; c < labels.size(); ++c) {
    auto* cls = report.add_classes();
    cls->set_label(labels[c]);
    const double p = c < result.metrics.precision.size() ? result.metrics.precision[c] : 0.0;
    const double r = c < result.metrics.recall.size() ? result.metrics.recall[c] : 0.0;
    cls->set_precision(p);
    cls->set_recall(r);
    cls->set_f1(p + r > 0 ? 2 * p * r / (p + r) : 0.0);
    std::int64_t support = 0;
    if (c < result.metrics.confusion.size()) {
      for (const auto count : result.metrics.confusion[c]) support += count;
    }
    cls->set_support(static_cast<std::uint64_t>(support));
  }
  for (const auto& row : result.metrics.confusion) {
    auto* out = report.add_confusion();
    for (const auto count : row) out->add_counts(static_cast<std::uint64_t>(count));
  }
  return report;
}

}  // namespace ts::worker
