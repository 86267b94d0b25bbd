// FileWritesFail: while it lives, every write(2) of this process to a regular file fails
// (RLIMIT_FSIZE 0: EFBIG, where a full disk gives ENOSPC), so the job store cannot commit nor
// SQLite size its shared-memory file; reads still work, and so do stores through a shared mapping
// of space a file already has (server/jobs/final_state_journal.h), as on a full disk.
#pragma once

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>

namespace ts::testing {

class FileWritesFail {
 public:
  FileWritesFail() {
    EXPECT_EQ(getrlimit(RLIMIT_FSIZE, &saved_), 0);
    signal(SIGXFSZ, SIG_IGN);  // the write fails instead of the process being killed
    rlimit none = saved_;
    none.rlim_cur = 0;
    EXPECT_EQ(setrlimit(RLIMIT_FSIZE, &none), 0);
  }
  ~FileWritesFail() { EXPECT_EQ(setrlimit(RLIMIT_FSIZE, &saved_), 0); }
  FileWritesFail(const FileWritesFail&) = delete;
  FileWritesFail& operator=(const FileWritesFail&) = delete;

 private:
  rlimit saved_{};
};

}  // namespace ts::testing
