#include "model/datasets.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "model/inputs.h"

namespace ts {
namespace {

namespace fs = std::filesystem;

class DatasetTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ =
        fs::temp_directory_path() /
        ("ts_datasets_test_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) +
         "_" + ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string Write(const std::string& name, const std::string& contents) {
    const fs::path path = dir_ / name;
    fs::create_directories(path.parent_path());
    std::ofstream(path, std::ios::binary) << contents;
    return path.string();
  }

  static DatasetReadOptions Skip() {
    DatasetReadOptions options;
    options.skip_malformed = true;
    return options;
  }

  fs::path dir_;
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
  EXPECT_EQ(ReadJsonLinesDataset(unknown, options).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(DatasetTest, JsonLinesMalformedFailsNamingFileAndLine) {
  const std::string good = "{\"text\": \"ok\", \"label\": \"a\"}\n";
  const std::vector<std::string> bad_lines = {
      "{\"text\": \"x\", \"label\": \"a\"",  // bad JSON
      "{\"text\": \"x\"}",                   // missing label
      "{\"label\": \"a\"}",                  // missing text
      "{\"text\": 5, \"label\": \"a\"}",     // text not a string
      "{\"text\": \"x\", \"label\": 1.5}",   // fractional label
      "{\"text\": \"x\", \"label\": -1}",    // negative label
      "{\"text\": \"x\", \"label\": null}",  // null label
      "{\"text\": \"x\", \"label\": 3}",     // integer after string labels
      "{\"text\": \"\", \"label\": \"a\"}",  // empty text
      "[\"x\", \"a\"]",                         // not an object
      "{\"text\": \"x\", \"label\": \"a\", \"label\": \"b\"}",  // duplicate key
      "{\"text\": \"x\xFF\", \"label\": \"a\"}",               // not UTF-8
      "{\"text\": \"x\", \"label\": 1e0}",   // exponent label
      "{\"text\": \"x\", \"label\": 18446744073709551616}",  // beyond 64 bits
  };
  for (const std::string& bad : bad_lines) {
    const std::string path = Write("bad.jsonl", good + good + bad + "\n" + good);
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

// --- ListOps generator and evaluator ---------------------------------------------------------

TEST(ListOpsTest, EvaluatesHandWrittenExpressions) {
  EXPECT_EQ(EvaluateListOps("[SM 5 [MAX 3 9 ] 8 ]").value(), 2);
  EXPECT_EQ(EvaluateListOps("[MED 1 5 3 ]").value(), 3);
  EXPECT_EQ(EvaluateListOps("[MED 4 1 9 7 ]").value(), 4);  // lower median of 1 4 7 9
  EXPECT_EQ(EvaluateListOps("[FIRST 7 [MIN 2 3 ] 1 ]").value(), 7);
  EXPECT_EQ(EvaluateListOps("[LAST 7 1 [MIN 2 3 ] ]").value(), 2);
  EXPECT_EQ(EvaluateListOps("[MAX 4 3 [MIN 2 3 ] 1 0 ]").value(), 4);
  EXPECT_EQ(EvaluateListOps("[MIN 4 3 [MAX 2 9 ] ]").value(), 3);
  EXPECT_EQ(EvaluateListOps("( ( [MAX 4 ( 3 ) ) ] )").value(), 4);  // LRA parentheses
  EXPECT_EQ(EvaluateListOps("6").value(), 6);
  for (const char* bad : {"", "[MAX 1 2", "[MAX ]", "[FOO 1 ]", "[MAX 1 12 ]", "[MAX 1 ] 2", "]"}) {
    EXPECT_EQ(EvaluateListOps(bad).status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
  EXPECT_EQ(ListOpsDepth("[SM 5 [MAX 3 [MIN 1 2 ] ] 8 ]"), 3);
}

TEST(ListOpsTest, GeneratorIsDeterministicBoundedAndCoversLabels) {
  ListOpsGeneratorOptions options;
  options.count = 500;
  options.seed = 7;
  absl::StatusOr<Dataset> a = GenerateListOpsDataset(options);
  ASSERT_TRUE(a.ok()) << a.status();
  absl::StatusOr<Dataset> b = GenerateListOpsDataset(options);
  ASSERT_TRUE(b.ok()) << b.status();
  ASSERT_EQ(a->examples.size(), 500u);
  std::set<std::int64_t> labels;
  std::set<std::size_t> lengths;
  int deepest = 0;
  for (std::size_t i = 0; i < a->examples.size(); ++i) {
    const Example& e = a->examples[i];
    EXPECT_EQ(e.tokens, b->examples[i].tokens);
    EXPECT_GE(e.tokens.size(), 500u);
    EXPECT_LE(e.tokens.size(), 2000u);
    EXPECT_LE(ListOpsDepth(e.tokens), 10);
    deepest = std::max(deepest, ListOpsDepth(e.tokens));
    EXPECT_EQ(EvaluateListOps(e.tokens).value(), e.label);
    labels.insert(e.label);
    lengths.insert(e.tokens.size() / 100);
  }
  EXPECT_EQ(labels.size(), 10u);
  EXPECT_GE(lengths.size(), 10u);  // spread over the length range, not one size
  EXPECT_GE(deepest, 3);
  EXPECT_EQ(a->label_names.size(), 10u);

  options.seed = 8;
  absl::StatusOr<Dataset> c = GenerateListOpsDataset(options);
  ASSERT_TRUE(c.ok());
  EXPECT_NE(c->examples[0].tokens, a->examples[0].tokens);
}

TEST(ListOpsTest, GeneratorShortLengthsAndBadOptions) {
  ListOpsGeneratorOptions options;
  options.count = 200;
  options.min_length = 10;
  options.max_length = 40;
  absl::StatusOr<Dataset> data = GenerateListOpsDataset(options);
  ASSERT_TRUE(data.ok()) << data.status();
  for (const Example& e : data->examples) {
    EXPECT_GE(e.tokens.size(), 10u);
    EXPECT_LE(e.tokens.size(), 40u);
  }
  options.max_length = 5;
  EXPECT_EQ(GenerateListOpsDataset(options).status().code(), absl::StatusCode::kInvalidArgument);
  options = {};
  options.min_length = 0;
  EXPECT_EQ(GenerateListOpsDataset(options).status().code(), absl::StatusCode::kInvalidArgument);
  options = {};
  options.count = -1;
  EXPECT_EQ(GenerateListOpsDataset(options).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ListOpsTest, UniformIntStaysInRangeAndIsFixedForASeed) {
  std::mt19937_64 rng(42);
  std::vector<int> counts(5, 0);
  for (int i = 0; i < 5000; ++i) {
    const std::int64_t x = UniformInt(rng, -2, 2);
    ASSERT_GE(x, -2);
    ASSERT_LE(x, 2);
    ++counts[x + 2];
  }
  for (int c : counts) EXPECT_GT(c, 800);
  // mt19937_64 is fully specified by the standard, so this sequence is too.
  std::mt19937_64 again(42);
  std::mt19937_64 reference(42);
  EXPECT_EQ(UniformInt(again, 0, 9), static_cast<std::int64_t>(reference() % 10));
}

// --- Split -----------------------------------------------------------------------------------

TEST(SplitDatasetTest, HoldsOutTheFractionDeterministically) {
  std::vector<Example> examples;
  for (int i = 0; i < 100; ++i) examples.push_back(Example{std::to_string(i), i % 3});
  absl::StatusOr<DatasetSplit> a = SplitDataset(examples, 0.1, 5);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->validation.size(), 10u);
  EXPECT_EQ(a->train.size(), 90u);
  std::set<std::string> seen;
  for (const Example& e : a->train) seen.insert(e.tokens);
  for (const Example& e : a->validation) seen.insert(e.tokens);
  EXPECT_EQ(seen.size(), 100u);  // a partition
  absl::StatusOr<DatasetSplit> b = SplitDataset(examples, 0.1, 5);
  ASSERT_TRUE(b.ok());
  for (std::size_t i = 0; i < a->validation.size(); ++i) {
    EXPECT_EQ(a->validation[i].tokens, b->validation[i].tokens);
  }
  absl::StatusOr<DatasetSplit> c = SplitDataset(examples, 0.1, 6);
  ASSERT_TRUE(c.ok());
  bool differs = false;
  for (std::size_t i = 0; i < a->validation.size(); ++i) {
    differs |= a->validation[i].tokens != c->validation[i].tokens;
  }
  EXPECT_TRUE(differs);

  absl::StatusOr<DatasetSplit> tiny = SplitDataset({examples[0], examples[1]}, 0.01, 1);
  ASSERT_TRUE(tiny.ok());
  EXPECT_EQ(tiny->validation.size(), 1u);
  EXPECT_EQ(SplitDataset(examples, 0.0, 1).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(SplitDataset(examples, 1.0, 1).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(SplitDataset({examples[0]}, 0.5, 1).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// --- DataRoot --------------------------------------------------------------------------------

TEST_F(DatasetTest, DataRootResolvesInsideAndRefusesEscapes) {
  Write("root/train.jsonl", "{}");
  Write("root/sub/val.jsonl", "{}");
  Write("outside/secret.txt", "password");
  fs::create_symlink(dir_ / "outside", dir_ / "root/escape_dir");
  fs::create_symlink(dir_ / "outside/secret.txt", dir_ / "root/escape_file");
  fs::create_symlink(dir_ / "root/sub", dir_ / "root/inner_link");
  fs::create_symlink(dir_ / "outside/nothing_yet", dir_ / "root/dangling");
  absl::StatusOr<DataRoot> root = DataRoot::Create((dir_ / "root").string());
  ASSERT_TRUE(root.ok()) << root.status();
  const std::string canonical_root = fs::canonical(dir_ / "root").string();
  EXPECT_EQ(root->root(), canonical_root);

  EXPECT_EQ(root->Resolve("train.jsonl").value(), canonical_root + "/train.jsonl");
  EXPECT_EQ(root->Resolve("sub/val.jsonl").value(), canonical_root + "/sub/val.jsonl");
  EXPECT_EQ(root->Resolve("./sub//val.jsonl").value(), canonical_root + "/sub/val.jsonl");
  EXPECT_EQ(root->Resolve("inner_link/val.jsonl").value(), canonical_root + "/sub/val.jsonl");
  EXPECT_EQ(root->Resolve("not_yet/out.ckpt").value(), canonical_root + "/not_yet/out.ckpt");

  for (const char* bad : {"", "/etc/passwd", "../outside/secret.txt", "sub/../../outside",
                          "sub/../train.jsonl", ".."}) {
    EXPECT_EQ(root->Resolve(bad).status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
  for (const char* escape :
       {"escape_dir/secret.txt", "escape_file", "escape_dir", "dangling", "dangling/x"}) {
    EXPECT_EQ(root->Resolve(escape).status().code(), absl::StatusCode::kPermissionDenied) << escape;
  }
  EXPECT_EQ(DataRoot::Create((dir_ / "none").string()).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(DataRoot::Create((dir_ / "root/train.jsonl").string()).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace ts
