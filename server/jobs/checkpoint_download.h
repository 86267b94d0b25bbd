// CheckpointFileReader: one checkpoint file open for the Jobs service's DownloadCheckpoint
// (jobs.proto), read once for its header (size, CRC-32, version) and then in chunks.
//
// The file is opened once and read through that descriptor, so a checkpoint replaced (atomic
// rename) or deleted (retention, DeleteJob) while it is sent still streams whole as it was when
// opened; exactly the size found at open is sent. Memory: one chunk. Not thread-safe (one call).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "taylorshift/v1/jobs.pb.h"

namespace ts::server {

class CheckpointFileReader {
 public:
  // Opens the regular file `path` and reads it once for the header, whose source is `source`
  // and file_name "<name>-<version>.tsckpt". NOT_FOUND / PERMISSION_DENIED / FAILED_PRECONDITION as
  // common/file_io.h's ReadFile (the message names `what`); DATA_LOSS when a read fails.
  static absl::StatusOr<std::unique_ptr<CheckpointFileReader>> Open(const std::string& path,
                                                                    const std::string& what,
                                                                    const std::string& source,
                                                                    const std::string& name);
  ~CheckpointFileReader();
  CheckpointFileReader(const CheckpointFileReader&) = delete;
  CheckpointFileReader& operator=(const CheckpointFileReader&) = delete;

  const taylorshift::v1::CheckpointHeader& header() const { return header_; }
  // The next at most `max_bytes` bytes of the file (empty once all were read). DATA_LOSS when
  // the file ends early.
  absl::StatusOr<std::string> Next(std::size_t max_bytes);

 private:
  CheckpointFileReader(int fd, std::string what) : fd_(fd), what_(std::move(what)) {}
  absl::Status Read(std::uint64_t offset, std::size_t bytes, std::string* out) const;

  const int fd_;
  const std::string what_;
  taylorshift::v1::CheckpointHeader header_;
  std::uint64_t offset_ = 0;
};

// Checks a DownloadCheckpointRequest's fields that need no lookup: a source, at most 16
// if_none_match versions, chunk_bytes at most api::kCheckpointChunkBytes (INVALID_ARGUMENT
// naming the field).
absl::Status ValidateDownloadRequest(const taylorshift::v1::DownloadCheckpointRequest& request);

}  // namespace ts::server
