// FinalStateJournal: where the job queue keeps the final states the job store refused (a full
// disk, a database held locked) so that they outlive the process: a file of fixed-size slots
// under the state dir, allocated in advance and written in place through a shared mapping.
// Keeping a state therefore needs no new disk space and no write(2) — what a full disk refuses.
//
// Contract:
// - Open creates the file with room for `slots` records (posix_fallocate, so that writing a slot
//   never needs a block: RESOURCE_EXHAUSTED when the disk has no room for it), or opens an
//   existing one, keeping its records; a smaller one is grown when there is room.
// - Keep writes one finished job's final state into a free slot (the job's own only when none is
//   free), flushes it to the disk (msync) before it returns and then frees the job's older slot:
//   the job's id, kind, name, state, reason, times and progress (the reason cut, then the progress
//   left out, to fit a slot). RESOURCE_EXHAUSTED when every slot holds another job.
// - Forget frees the job's slot once the store has taken the state (a no-op for an unknown id).
// - Records: the states kept, as read at Open and kept since, oldest slot first. A slot whose
//   checksum does not match (a write cut short by a crash) reads as free.
// - Thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "taylorshift/v1/jobs.pb.h"

namespace ts::server {

class FinalStateJournal {
 public:
  // Bytes of one slot: a 16-byte header (magic, length, CRC-32, sequence number) and the
  // serialized job.
  static constexpr std::size_t kSlotBytes = 4096;

  static absl::StatusOr<std::unique_ptr<FinalStateJournal>> Open(const std::string& path,
                                                                 int slots);
  ~FinalStateJournal();
  FinalStateJournal(const FinalStateJournal&) = delete;
  FinalStateJournal& operator=(const FinalStateJournal&) = delete;

  const std::string& path() const { return path_; }

  absl::Status Keep(const taylorshift::v1::Job& job);
  absl::Status Forget(const std::string& id);
  std::vector<taylorshift::v1::Job> Records() const;

 private:
  FinalStateJournal(std::string path, int fd, char* mapping, std::size_t slots);

  // Writes `bytes` (the serialized job, at most a slot's payload) into slot `slot` and msyncs it.
  absl::Status WriteSlot(std::size_t slot, const std::string& bytes)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::string path_;
  const int fd_;
  char* const mapping_;
  const std::size_t slots_;

  mutable absl::Mutex mu_;
  std::vector<std::string> ids_ ABSL_GUARDED_BY(mu_);            // by slot; empty = free
  std::vector<taylorshift::v1::Job> jobs_ ABSL_GUARDED_BY(mu_);  // by slot
  std::uint32_t next_sequence_ ABSL_GUARDED_BY(mu_) = 1;
};

}  // namespace ts::server
