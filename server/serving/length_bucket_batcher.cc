#include "server/serving/length_bucket_batcher.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace ts::server {
namespace {

absl::Status InvalidOption(absl::string_view field, absl::string_view requirement,
                           absl::string_view got) {
  return absl::InvalidArgumentError(
      absl::StrCat("LengthBucketBatcherOptions.", field, " ", requirement, " (got ", got, ")"));
}

}  // namespace

namespace batcher_internal {

absl::Status ValidateOptions(const LengthBucketBatcherOptions& options) {
  const auto& boundaries = options.bucket_boundaries;
  for (std::size_t i = 0; i < boundaries.size(); ++i) {
    if (boundaries[i] <= 0 || (i > 0 && boundaries[i] <= boundaries[i - 1])) {
      return InvalidOption("bucket_boundaries", "must be > 0 and strictly ascending",
                           absl::StrCat("[", absl::StrJoin(boundaries, ", "), "]"));
    }
  }
  if (options.max_batch_tokens <= 0) {
    return InvalidOption("max_batch_tokens", "must be > 0", absl::StrCat(options.max_batch_tokens));
  }
  if (options.max_batch_size <= 0) {
    return InvalidOption("max_batch_size", "must be > 0", absl::StrCat(options.max_batch_size));
  }
  if (options.max_queue_delay < absl::ZeroDuration()) {
    return InvalidOption("max_queue_delay", "must be >= 0",
                         absl::FormatDuration(options.max_queue_delay));
  }
  if (options.max_queue_size <= 0) {
    return InvalidOption("max_queue_size", "must be > 0", absl::StrCat(options.max_queue_size));
  }
  if (!(options.max_batch_cost >= 0)) {
    return InvalidOption("max_batch_cost", "must be >= 0 (0 = no limit)",
                         absl::StrCat(options.max_batch_cost));
  }
  if (options.batch_threads < 1) {
    return InvalidOption("batch_threads", "must be >= 1", absl::StrCat(options.batch_threads));
  }
  return absl::OkStatus();
}

std::int64_t PaddedLength(const LengthBucketBatcherOptions& options, std::int64_t tokens) {
  const auto& boundaries = options.bucket_boundaries;
  auto it = std::lower_bound(boundaries.begin(), boundaries.end(), tokens);
  return it == boundaries.end() ? tokens : *it;
}

std::int64_t RowCapacity(const LengthBucketBatcherOptions& options, std::int64_t padded_tokens) {
  return std::max<std::int64_t>(1, options.max_batch_tokens / padded_tokens);
}

}  // namespace batcher_internal
}  // namespace ts::server
