#include "server/jobs/final_state_journal.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/atomic_file.h"

namespace ts::server {
namespace pb = taylorshift::v1;

namespace {

constexpr char kMagic[4] = {'T', 'S', 'F', '1'};
// Magic, payload length, CRC-32 of the payload, and the write's sequence number (later writes
// have larger ones: of two slots that hold one job, the larger number is its newer state).
constexpr std::size_t kHeaderBytes = 16;
constexpr std::size_t kPayloadBytes = FinalStateJournal::kSlotBytes - kHeaderBytes;

std::uint32_t Crc32(const char* data, std::size_t size) {
  return static_cast<std::uint32_t>(
      crc32_z(crc32_z(0L, Z_NULL, 0), reinterpret_cast<const Bytef*>(data), size));
}

std::uint32_t LoadU32(const char* at) {
  std::uint32_t value = 0;
  std::memcpy(&value, at, sizeof(value));
  return value;
}

void StoreU32(char* at, std::uint32_t value) { std::memcpy(at, &value, sizeof(value)); }

// "WHAT: the system's message", with the code FileErrorStatus gives `error_number`.
absl::Status SystemError(int error_number, const std::string& what) {
  return FileErrorStatus(error_number, absl::StrCat(what, ": ", std::strerror(error_number)));
}

// What a slot keeps of a finished job, serialized to fit kPayloadBytes: the reason is cut (at a
// UTF-8 character boundary) and then the progress left out when the whole does not fit.
std::string SlotPayload(const pb::Job& job) {
  pb::Job kept;
  kept.set_id(job.id());
  kept.set_kind(job.kind());
  kept.set_name(job.name());
  kept.set_state(job.state());
  kept.set_reason(job.reason());
  *kept.mutable_create_time() = job.create_time();
  *kept.mutable_start_time() = job.start_time();
  *kept.mutable_end_time() = job.end_time();
  *kept.mutable_progress() = job.progress();
  std::string bytes = kept.SerializeAsString();
  if (bytes.size() <= kPayloadBytes) return bytes;
  constexpr char kCut[] = " ...";
  const std::size_t over = bytes.size() - kPayloadBytes + sizeof(kCut) + 8;
  std::string reason =
      job.reason().substr(0, job.reason().size() > over ? job.reason().size() - over : 0);
  while (!reason.empty() && (static_cast<unsigned char>(reason.back()) & 0xC0) == 0x80) {
    reason.pop_back();  // a continuation byte: the character it belongs to goes too
  }
  if (!reason.empty() && (static_cast<unsigned char>(reason.back()) & 0x80) != 0) reason.pop_back();
  kept.set_reason(reason + kCut);
  bytes = kept.SerializeAsString();
  if (bytes.size() <= kPayloadBytes) return bytes;
  kept.clear_progress();
  return kept.SerializeAsString();
}

}  // namespace

absl::StatusOr<std::unique_ptr<FinalStateJournal>> FinalStateJournal::Open(const std::string& path,
                                                                           int slots) {
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) {
    const int error = errno;
    return SystemError(error, absl::StrCat("cannot open ", path));
  }
  const auto fail = [fd](absl::Status status) {
    ::close(fd);
    return status;
  };
  struct stat info {};
  if (::fstat(fd, &info) != 0) {
    const int error = errno;
    return fail(SystemError(error, absl::StrCat("cannot stat ", path)));
  }
  std::size_t have = static_cast<std::size_t>(info.st_size) / kSlotBytes;
  const std::size_t want = static_cast<std::size_t>(std::max(slots, 1));
  if (have < want) {
    // Allocated now, while it costs nothing to refuse: a slot written later needs no new block.
    int error = ::posix_fallocate(fd, 0, static_cast<off_t>(want * kSlotBytes));
    if (error == 0 && ::fsync(fd) != 0) error = errno;
    if (error == 0) {
      have = want;
    } else if (have == 0) {
      return fail(SystemError(
          error, absl::StrCat("cannot allocate ", want * kSlotBytes, " bytes for ", path)));
    }
  }
  void* mapping = ::mmap(nullptr, have * kSlotBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (mapping == MAP_FAILED) {
    const int error = errno;
    return fail(SystemError(error, absl::StrCat("cannot map ", path)));
  }
  std::unique_ptr<FinalStateJournal> journal(
      new FinalStateJournal(path, fd, static_cast<char*>(mapping), have));
  absl::MutexLock lock(&journal->mu_);
  std::vector<std::uint32_t> sequence(have, 0);
  for (std::size_t slot = 0; slot < have; ++slot) {
    const char* at = journal->mapping_ + slot * kSlotBytes;
    if (std::memcmp(at, kMagic, sizeof(kMagic)) != 0) continue;
    const std::uint32_t length = LoadU32(at + 4);
    if (length > kPayloadBytes || Crc32(at + kHeaderBytes, length) != LoadU32(at + 8)) continue;
    pb::Job job;
    if (!job.ParseFromArray(at + kHeaderBytes, static_cast<int>(length)) || job.id().empty()) {
      continue;
    }
    sequence[slot] = LoadU32(at + 12);
    journal->next_sequence_ = std::max(journal->next_sequence_, sequence[slot] + 1);
    // A crash between writing a job's newer state and freeing its older slot leaves both: the
    // older one is freed now.
    const auto same = std::find(journal->ids_.begin(), journal->ids_.end(), job.id());
    if (same != journal->ids_.end()) {
      const auto other = static_cast<std::size_t>(same - journal->ids_.begin());
      const std::size_t older = sequence[other] < sequence[slot] ? other : slot;
      const std::size_t newer = older == slot ? other : slot;
      if (newer == slot) journal->jobs_[slot] = std::move(job);
      journal->ids_[newer] = journal->ids_[other];
      journal->ids_[older].clear();
      journal->jobs_[older].Clear();
      (void)journal->WriteSlot(older, std::string());
      continue;
    }
    journal->ids_[slot] = job.id();
    journal->jobs_[slot] = std::move(job);
  }
  return journal;
}

FinalStateJournal::FinalStateJournal(std::string path, int fd, char* mapping, std::size_t slots)
    : path_(std::move(path)),
      fd_(fd),
      mapping_(mapping),
      slots_(slots),
      ids_(slots),
      jobs_(slots) {}

FinalStateJournal::~FinalStateJournal() {
  ::munmap(mapping_, slots_ * kSlotBytes);
  ::close(fd_);
}

absl::Status FinalStateJournal::WriteSlot(std::size_t slot, const std::string& bytes) {
  char* at = mapping_ + slot * kSlotBytes;
  std::memset(at, 0, sizeof(kMagic));  // free while it changes
  if (!bytes.empty()) {
    std::memcpy(at + kHeaderBytes, bytes.data(), bytes.size());
    StoreU32(at + 4, static_cast<std::uint32_t>(bytes.size()));
    StoreU32(at + 8, Crc32(bytes.data(), bytes.size()));
    StoreU32(at + 12, next_sequence_++);
    std::memcpy(at, kMagic, sizeof(kMagic));
  }
  // Slots are page-aligned (kSlotBytes is a multiple of the 4 KiB page).
  if (::msync(at, kSlotBytes, MS_SYNC) != 0) {
    const int error = errno;
    return SystemError(error, absl::StrCat("cannot flush ", path_));
  }
  return absl::OkStatus();
}

absl::Status FinalStateJournal::Keep(const pb::Job& job) {
  const std::string bytes = SlotPayload(job);
  absl::MutexLock lock(&mu_);
  // A newer state of a job already kept goes to a free slot first and the old slot is freed
  // after, so that a crash between the two leaves one of them whole (both whole: Open keeps the
  // newer, by its sequence number). Only when no slot is free is the job's own slot rewritten in
  // place.
  const auto own = std::find(ids_.begin(), ids_.end(), job.id());
  auto slot = std::find(ids_.begin(), ids_.end(), std::string());
  if (slot == ids_.end()) slot = own;
  if (slot == ids_.end()) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "all ", slots_, " slots of ", path_, " hold final states the job store has not taken"));
  }
  const auto index = static_cast<std::size_t>(slot - ids_.begin());
  if (absl::Status s = WriteSlot(index, bytes); !s.ok()) return s;
  if (own != ids_.end() && own != slot) {
    const auto old = static_cast<std::size_t>(own - ids_.begin());
    ids_[old].clear();
    jobs_[old].Clear();
    (void)WriteSlot(old, std::string());  // a failure leaves two copies: Open frees the older
  }
  ids_[index] = job.id();
  jobs_[index].ParseFromString(bytes);
  return absl::OkStatus();
}

absl::Status FinalStateJournal::Forget(const std::string& id) {
  absl::MutexLock lock(&mu_);
  const auto slot = std::find(ids_.begin(), ids_.end(), id);
  if (id.empty() || slot == ids_.end()) return absl::OkStatus();
  const auto index = static_cast<std::size_t>(slot - ids_.begin());
  ids_[index].clear();
  jobs_[index].Clear();
  return WriteSlot(index, std::string());
}

std::vector<pb::Job> FinalStateJournal::Records() const {
  absl::MutexLock lock(&mu_);
  std::vector<pb::Job> records;
  for (std::size_t slot = 0; slot < slots_; ++slot) {
    if (!ids_[slot].empty()) records.push_back(jobs_[slot]);
  }
  return records;
}

}  // namespace ts::server
