#include "model/data/dataset_readers.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "model/api/inputs.h"
#include "tests/testing/scratch_dir.h"

namespace ts {
namespace {

namespace fs = std::filesystem;

class DatasetTest : public testing::ScratchDirTest {
 protected:
  static DatasetReadOptions Skip() {
    DatasetReadOptions options;
    options.skip_malformed = true;
    return options;
  }
};

// --- JSON Lines ---------------------------------------------------------------------------

TEST_F(DatasetTest, JsonLinesStringLabelsInferredSorted) {
  const std::string path = Write("a.jsonl",
                                 "\xEF\xBB\xBF{\"text\": \"good film\", \"label\": \"pos\"}\r\n"
                                 "\n"
                                 "{\"label\": \"neg\", \"text\": \"bad \\u00e9\", \"id\": [1]}\n"
                                 "{\"text\": \"fine\", \"label\": \"mixed\"}\n");
  absl::StatusOr<Dataset> data = ReadJsonLinesDataset(path);
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(data->label_names, (std::vector<std::string>{"mixed", "neg", "pos"}));
  ASSERT_EQ(data->examples.size(), 3u);
  EXPECT_EQ(data->examples[0].tokens, "good film");
  EXPECT_EQ(data->examples[0].label, 2);
  EXPECT_EQ(data->examples[1].tokens, "bad \xC3\xA9");
  EXPECT_EQ(data->examples[1].label, 1);
  EXPECT_EQ(data->examples[2].label, 0);
  EXPECT_EQ(data->skipped, 0);
}

// The submission's look at a file's labels: distinct labels in first-seen order, the first
// unknown one with its line, malformed records passed over, and only whole lines of the first
// max_bytes read.
TEST_F(DatasetTest, JsonLinesLabelScanReadsWholeLinesUpToItsBound) {
  const std::string body =
      "\xEF\xBB\xBF{\"text\": \"a\", \"label\": \"pos\"}\r\n"
      "\n"
      "not json\n"
      "{\"text\": \"b\", \"label\": 1}\n"
      "{\"text\": \"c\", \"label\": \"odd\"}\n"
      "{\"text\": \"d\", \"label\": 7}\n";
  const std::string path = Write("a.jsonl", body);
  absl::StatusOr<JsonLinesLabelScan> scan =
      ScanJsonLinesLabels(path, {"neg", "pos"}, static_cast<std::int64_t>(body.size()));
  ASSERT_TRUE(scan.ok()) << scan.status();
  EXPECT_TRUE(scan->complete);
  EXPECT_EQ(scan->labels, (std::vector<std::string>{"pos", "1", "odd", "7"}));
  EXPECT_EQ(scan->unknown_line, 5);
  EXPECT_EQ(scan->unknown_label, "odd");

  // Cut inside line 5: lines 1-4 only, and nothing unknown in them.
  const auto cut = static_cast<std::int64_t>(body.find("odd"));
  scan = ScanJsonLinesLabels(path, {"neg", "pos"}, cut);
  ASSERT_TRUE(scan.ok()) << scan.status();
  EXPECT_FALSE(scan->complete);
  EXPECT_EQ(scan->labels, (std::vector<std::string>{"pos", "1"}));
  EXPECT_EQ(scan->unknown_line, 0);

  EXPECT_EQ(ScanJsonLinesLabels((dir_ / "missing.jsonl").string(), {"a"}, 100).status().code(),
            absl::StatusCode::kNotFound);
}

TEST_F(DatasetTest, JsonLinesIntegerLabelsAndGivenLabels) {
  const std::string path = Write("a.jsonl",
                                 "{\"text\": \"a\", \"label\": 2}\n"
                                 "{\"text\": \"b\", \"label\": 0}\n");
  absl::StatusOr<Dataset> data = ReadJsonLinesDataset(path);
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(data->label_names, (std::vector<std::string>{"0", "1", "2"}));
  EXPECT_EQ(data->examples[0].label, 2);

  // Given labels: integers index them, strings name them.
  const std::string mixed = Write("b.jsonl",
                                  "{\"text\": \"a\", \"label\": 1}\n"
                                  "{\"text\": \"b\", \"label\": \"zebra\"}\n");
  DatasetReadOptions options;
  options.labels = {"zebra", "ant"};
  data = ReadJsonLinesDataset(mixed, options);
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(data->label_names, options.labels);
  EXPECT_EQ(data->examples[0].label, 1);
  EXPECT_EQ(data->examples[1].label, 0);

  const std::string unknown = Write("c.jsonl", "{\"text\": \"a\", \"label\": \"cat\"}\n");
  const absl::Status refused = ReadJsonLinesDataset(unknown, options).status();
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument);
  // Issue 45: the message names the labels it expected, not only how many.
  EXPECT_NE(
      std::string(refused.message()).find("label \"cat\" is not one of the 2 labels [zebra, ant]"),
      std::string::npos)
      << refused;
}

TEST_F(DatasetTest, JsonLinesMalformedFailsNamingFileAndLine) {
  const std::string good = "{\"text\": \"ok\", \"label\": \"a\"}\n";
  const std::vector<std::string> bad_lines = {
      "{\"text\": \"x\", \"label\": \"a\"",                     // bad JSON
      "{\"text\": \"x\"}",                                      // missing label
      "{\"label\": \"a\"}",                                     // missing text
      "{\"text\": 5, \"label\": \"a\"}",                        // text not a string
      "{\"text\": \"x\", \"label\": 1.5}",                      // fractional label
      "{\"text\": \"x\", \"label\": -1}",                       // negative label
      "{\"text\": \"x\", \"label\": null}",                     // null label
      "{\"text\": \"x\", \"label\": 3}",                        // integer after string labels
      "{\"text\": \"\", \"label\": \"a\"}",                     // empty text
      "[\"x\", \"a\"]",                                         // not an object
      "{\"text\": \"x\", \"label\": \"a\", \"label\": \"b\"}",  // duplicate key
      "{\"text\": \"x\xFF\", \"label\": \"a\"}",                // not UTF-8
      "{\"text\": \"x\", \"label\": 1e0}",                      // exponent label
      "{\"text\": \"x\", \"label\": 18446744073709551616}",     // beyond 64 bits
  };
  for (const std::string& bad : bad_lines) {
    const std::string path = Write("bad.jsonl", absl::StrCat(good, good, bad, "\n", good));
    absl::StatusOr<Dataset> data = ReadJsonLinesDataset(path);
    EXPECT_EQ(data.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(data.status().message().find(path + ":3:"), std::string::npos)
        << bad << " → " << data.status();

    data = ReadJsonLinesDataset(path, Skip());
    ASSERT_TRUE(data.ok()) << bad << " → " << data.status();
    EXPECT_EQ(data->examples.size(), 3u) << bad;
    EXPECT_EQ(data->skipped, 1) << bad;
    ASSERT_EQ(data->skip_reasons.size(), 1u);
    EXPECT_NE(data->skip_reasons[0].find(path + ":3:"), std::string::npos);
  }
}

TEST_F(DatasetTest, JsonLinesErrorsSayWhatAndWhere) {
  const auto message = [&](const std::string& line) {
    const std::string path = Write("m.jsonl", "{\"text\": \"ok\", \"label\": 0}\n" + line + "\n");
    return std::string(ReadJsonLinesDataset(path).status().message());
  };
  const std::string at = (dir_ / "m.jsonl").string() + ":2: ";
  EXPECT_EQ(message("{\"text\": \"x\", \"label\": 0,}").rfind(at + "invalid JSON at byte 26: ", 0),
            0u)
      << message("{\"text\": \"x\", \"label\": 0,}");
  EXPECT_NE(message("{\"text\": \"x\xFF\", \"label\": 0}").find("ill-formed UTF-8"),
            std::string::npos);
  EXPECT_NE(message("[1]").find(at + "expected a JSON object, got array"), std::string::npos);
  EXPECT_NE(message("{\"text\": \"x\", \"label\": 0, \"text\": \"y\"}")
                .find(at + "duplicate key \"text\""),
            std::string::npos);
  EXPECT_NE(
      message("{\"text\": 5, \"label\": 0}").find(at + "\"text\" must be a string, got number"),
      std::string::npos);
  EXPECT_NE(message("{\"text\": \"x\", \"label\": 2.5}")
                .find(at + "\"label\" must be a string or a non-negative integer, got 2.5"),
            std::string::npos);
  EXPECT_NE(message("{\"text\": \"x\", \"label\": -3}")
                .find(at + "integer label -3 is outside [0, 65536)"),
            std::string::npos);
  // Numbers beyond double's range: the parser throws another exception than for bad syntax
  // (found by tests/fuzz/jsonl_dataset_fuzz; it ended the process).
  EXPECT_EQ(message("{\"text\": \"x\", \"label\": 1e400}"),
            at + "invalid JSON: \"label\": number overflow parsing '1e400' (beyond the range of a "
                 "double)");
  EXPECT_NE(message("{\"text\": \"x\", \"label\": -" + std::string(5000, '9') + "}")
                .find(at + "invalid JSON: \"label\": number overflow parsing '-999"),
            std::string::npos);
  EXPECT_LT(message("{\"text\": \"x\", \"label\": -" + std::string(5000, '9') + "}").size(), 400u);
}

TEST_F(DatasetTest, SkipModeCountsAllButKeepsFirstFewReasons) {
  std::string contents = "{\"text\": \"ok\", \"label\": \"a\"}\n";
  for (int i = 0; i < 8; ++i) contents += "not json\n";
  const std::string path = Write("bad.jsonl", contents);
  DatasetReadOptions options = Skip();
  options.max_skip_reasons = 3;
  absl::StatusOr<Dataset> data = ReadJsonLinesDataset(path, options);
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(data->skipped, 8);
  ASSERT_EQ(data->skip_reasons.size(), 3u);
  EXPECT_NE(data->skip_reasons[0].find(":2:"), std::string::npos);
  EXPECT_NE(data->skip_reasons[2].find(":4:"), std::string::npos);

  // Nothing usable at all is an error even when skipping.
  const std::string all_bad = Write("all_bad.jsonl", "nope\n");
  EXPECT_EQ(ReadJsonLinesDataset(all_bad, Skip()).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(DatasetTest, JsonLinesMissingOrUnreadableFile) {
  EXPECT_EQ(ReadJsonLinesDataset((dir_ / "none.jsonl").string()).status().code(),
            absl::StatusCode::kNotFound);
  fs::create_directories(dir_ / "dir.jsonl");
  EXPECT_FALSE(ReadJsonLinesDataset((dir_ / "dir.jsonl").string()).ok());
}

// --- Folder per class ------------------------------------------------------------------------

TEST_F(DatasetTest, FolderPerClassSortedClassesAndFiles) {
  Write("imdb/pos/2_9.txt", "great");
  Write("imdb/pos/1_10.txt", "superb\n\x01 bytes");
  Write("imdb/neg/0_1.txt", "awful");
  Write("imdb/neg/notes.md", "ignored");
  Write("imdb/.hidden/x.txt", "ignored");
  Write("imdb/unsup/5_0.txt", "unlabelled");
  Write("imdb/urls.txt", "a file at the top is not a class");
  absl::StatusOr<Dataset> data = ReadFolderDataset((dir_ / "imdb").string());
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(data->label_names, (std::vector<std::string>{"neg", "pos", "unsup"}));
  ASSERT_EQ(data->examples.size(), 4u);
  EXPECT_EQ(data->examples[0].tokens, "awful");
  EXPECT_EQ(data->examples[0].label, 0);
  EXPECT_EQ(data->examples[1].tokens, "superb\n\x01 bytes");
  EXPECT_EQ(data->examples[1].label, 1);
  EXPECT_EQ(data->examples[2].tokens, "great");

  DatasetReadOptions options;
  options.labels = {"neg", "pos"};  // leaves out unsup/
  data = ReadFolderDataset((dir_ / "imdb").string(), options);
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(data->examples.size(), 3u);
  EXPECT_EQ(data->label_names, options.labels);

  options.labels = {"neg", "missing"};
  EXPECT_EQ(ReadFolderDataset((dir_ / "imdb").string(), options).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ReadFolderDataset((dir_ / "nothing").string()).status().code(),
            absl::StatusCode::kNotFound);
}

TEST_F(DatasetTest, FolderUnreadableEntriesFailOrSkipNamingTheFile) {
  Write("imdb/pos/a.txt", "fine");
  Write("imdb/neg/b.txt", "fine too");
  fs::create_directories(dir_ / "imdb/neg/dir.txt");  // not a regular file
  fs::create_symlink(dir_ / "gone", dir_ / "imdb/pos/dangling.txt");
  Write("imdb/pos/empty.txt", "");
  const std::string root = (dir_ / "imdb").string();
  absl::StatusOr<Dataset> data = ReadFolderDataset(root);
  EXPECT_EQ(data.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(data.status().message().find("dir.txt"), std::string::npos) << data.status();

  data = ReadFolderDataset(root, Skip());
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(data->examples.size(), 2u);
  EXPECT_EQ(data->skipped, 3);
  ASSERT_EQ(data->skip_reasons.size(), 3u);
  EXPECT_NE(data->skip_reasons[1].find("dangling.txt"), std::string::npos);
  EXPECT_NE(data->skip_reasons[2].find("empty.txt"), std::string::npos);
}

TEST_F(DatasetTest, FolderSymlinkOutOfConfinedRootIsRefused) {
  Write("secret.txt", "password");
  Write("root/imdb/pos/a.txt", "fine");
  fs::create_symlink(dir_ / "secret.txt", dir_ / "root/imdb/pos/leak.txt");
  DatasetReadOptions options;
  options.confine_to = (dir_ / "root").string();
  EXPECT_EQ(ReadFolderDataset((dir_ / "root/imdb").string(), options).status().code(),
            absl::StatusCode::kPermissionDenied);
  options.skip_malformed = true;  // a security refusal is never skipped
  EXPECT_EQ(ReadFolderDataset((dir_ / "root/imdb").string(), options).status().code(),
            absl::StatusCode::kPermissionDenied);
  options.confine_to = dir_.string();
  absl::StatusOr<Dataset> data = ReadFolderDataset((dir_ / "root/imdb").string(), options);
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(data->examples.size(), 2u);
}

// --- ListOps TSV -----------------------------------------------------------------------------

TEST_F(DatasetTest, ListOpsTsvReadsRows) {
  const std::string path = Write("basic_train.tsv",
                                 "Source\tTarget\n"
                                 "( ( [MAX 4 3 ) ] )\t4\n"
                                 "[SM 5 [MAX 3 9 ] 8 ]\t2\r\n");
  absl::StatusOr<Dataset> data = ReadListOpsTsvDataset(path);
  ASSERT_TRUE(data.ok()) << data.status();
  ASSERT_EQ(data->examples.size(), 2u);
  EXPECT_EQ(data->examples[0].tokens, "( ( [MAX 4 3 ) ] )");
  EXPECT_EQ(data->examples[0].label, 4);
  EXPECT_EQ(data->examples[1].label, 2);
  EXPECT_EQ(data->label_names.size(), 10u);
}

TEST_F(DatasetTest, ListOpsTsvMalformedRows) {
  for (const std::string& bad :
       {std::string("[MAX 1 2 ]"), std::string("[MAX 1 2 ]\t2\textra"),
        std::string("[MAX 1 2 ]\t12"), std::string("\t3"), std::string("[MAX 1 2 ]\tx")}) {
    const std::string path =
        Write("bad.tsv", "Source\tTarget\n[MIN 1 2 ]\t1\n" + bad + "\n[MIN 3 4 ]\t3\n");
    absl::StatusOr<Dataset> data = ReadListOpsTsvDataset(path);
    EXPECT_EQ(data.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(data.status().message().find(path + ":3:"), std::string::npos) << data.status();
    data = ReadListOpsTsvDataset(path, Skip());
    ASSERT_TRUE(data.ok()) << data.status();
    EXPECT_EQ(data->examples.size(), 2u);
    EXPECT_EQ(data->skipped, 1);
  }
  const std::string no_header = Write("nohead.tsv", "[MIN 1 2 ]\t1\n");
  EXPECT_EQ(ReadListOpsTsvDataset(no_header, Skip()).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// --- CIFAR-10 --------------------------------------------------------------------------------

std::string CifarRecord(unsigned char label, unsigned char r, unsigned char g, unsigned char b) {
  std::string record(1, static_cast<char>(label));
  record += std::string(1024, static_cast<char>(r));
  record += std::string(1024, static_cast<char>(g));
  record += std::string(1024, static_cast<char>(b));
  return record;
}

// A stop asked for while a data set loads ends the read before the next record (ABORTED, saying
// where), in every format: a worker stopped during a long load need not wait for all of it.
TEST_F(DatasetTest, AStopRequestedWhileReadingEndsTheReadBeforeTheNextRecord) {
  std::string jsonl, tsv = "Source\tTarget\n", cifar;
  for (int i = 0; i < 20; ++i) {
    absl::StrAppend(&jsonl, "{\"text\": \"t", i, "\", \"label\": \"l", i % 2, "\"}\n");
    absl::StrAppend(&tsv, "[MAX 1 ", i % 10, " ]\t", i % 10, "\n");
    cifar += CifarRecord(i % 10, 1, 2, 3);
    Write(absl::StrCat("folder/a/", 100 + i, ".txt"), "x");
  }
  const std::string jsonl_path = Write("stop.jsonl", jsonl);
  const std::string tsv_path = Write("stop.tsv", tsv);
  const std::string cifar_path = Write("stop.bin", cifar);
  const std::string folder = (dir_ / "folder").string();
  int asked = 0;
  DatasetReadOptions options;
  options.stop_requested = [&asked] { return ++asked > 5; };  // stop at the sixth record
  const auto expect_stopped = [&](const absl::StatusOr<Dataset>& data, const std::string& path) {
    EXPECT_EQ(data.status().code(), absl::StatusCode::kAborted) << data.status();
    EXPECT_EQ(data.status().message(),
              absl::StrCat("stopped while reading ", path, " after 5 examples"));
    EXPECT_EQ(asked, 6);
    asked = 0;
  };
  expect_stopped(ReadJsonLinesDataset(jsonl_path, options), jsonl_path);
  expect_stopped(ReadListOpsTsvDataset(tsv_path, options), tsv_path);
  expect_stopped(ReadCifar10Dataset(cifar_path, options), cifar_path);
  expect_stopped(ReadFolderDataset(folder, options), folder);
  // Never asked to stop: all of it.
  options.stop_requested = [] { return false; };
  auto all = ReadJsonLinesDataset(jsonl_path, options);
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_EQ(all->examples.size(), 20u);
}

TEST_F(DatasetTest, CifarPlanarRecordsBecomeGrayscale) {
  std::string record = CifarRecord(3, 200, 100, 50);
  // Pixel 5 differs per plane, to catch an interleaved reading.
  record[1 + 5] = static_cast<char>(10);
  record[1 + 1024 + 5] = static_cast<char>(20);
  record[1 + 2048 + 5] = static_cast<char>(250);
  const std::string path = Write("data_batch_1.bin", record + CifarRecord(9, 0, 0, 0));
  absl::StatusOr<Dataset> data = ReadCifar10Dataset(path);
  ASSERT_TRUE(data.ok()) << data.status();
  ASSERT_EQ(data->examples.size(), 2u);
  EXPECT_EQ(data->label_names[3], "cat");
  EXPECT_EQ(data->examples[0].label, 3);
  EXPECT_EQ(data->examples[1].label, 9);
  ASSERT_EQ(data->examples[0].tokens.size(), 1024u);
  // Independent float64 computation of the conversion.
  const auto gray = [](double r, double g, double b) {
    return static_cast<unsigned char>(std::lround(0.2989 * r + 0.5870 * g + 0.1140 * b));
  };
  EXPECT_EQ(static_cast<unsigned char>(data->examples[0].tokens[0]), gray(200, 100, 50));
  EXPECT_EQ(static_cast<unsigned char>(data->examples[0].tokens[5]), gray(10, 20, 250));
  EXPECT_EQ(static_cast<unsigned char>(data->examples[1].tokens[7]), 0);
  // Same as ImageToTokens on the interleaved pixel.
  absl::StatusOr<std::string> one = ImageToTokens(1, 1, 3, std::string("\x0a\x14\xfa", 3));
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(data->examples[0].tokens[5], (*one)[0]);
}

TEST_F(DatasetTest, CifarTruncatedAndBadLabelRecords) {
  const std::string truncated =
      Write("t.bin", CifarRecord(1, 1, 2, 3) + CifarRecord(2, 1, 2, 3).substr(0, 100));
  absl::StatusOr<Dataset> data = ReadCifar10Dataset(truncated);
  EXPECT_EQ(data.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(data.status().message().find("record 1"), std::string::npos) << data.status();
  data = ReadCifar10Dataset(truncated, Skip());
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(data->examples.size(), 1u);
  EXPECT_EQ(data->skipped, 1);

  const std::string bad_label = Write("l.bin", CifarRecord(12, 1, 2, 3) + CifarRecord(2, 1, 2, 3));
  data = ReadCifar10Dataset(bad_label);
  EXPECT_NE(data.status().message().find("record 0"), std::string::npos) << data.status();
  data = ReadCifar10Dataset(bad_label, Skip());
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(data->examples.size(), 1u);
  EXPECT_EQ(data->examples[0].label, 2);
}

}  // namespace
}  // namespace ts
