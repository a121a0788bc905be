// End-to-end tests of the parafab command: real processes, real files.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "tests/common/temp_dir.h"

namespace parafab {
namespace {

struct CmdResult {
  int status = -1;
  std::string out;  // stdout and stderr together
};

std::string bin() { return PARAFAB_BIN_PATH; }

// env_prefix: e.g. "PARAFAB_THREADS=1 " or "taskset -c 0 ", before the binary.
CmdResult run_cli(const std::string& args, const std::string& env_prefix = "") {
  const std::string cmd = env_prefix + bin() + " " + args + " 2>&1";
  CmdResult r;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return r;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  const int st = pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

std::string read_file(const std::string& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

size_t count_lines(const std::string& s) { return std::count(s.begin(), s.end(), '\n'); }

bool contains(const std::string& hay, const std::string& needle) { return hay.find(needle) != std::string::npos; }

// Writes the lines of `file` into a and b, cut at the first line end past
// 1/part of its bytes.
void split_lines(const std::string& file, size_t part, const std::string& a, const std::string& b) {
  const std::string whole = read_file(file);
  const size_t cut = whole.find('\n', whole.size() / part) + 1;
  std::ofstream(a, std::ios::binary) << whole.substr(0, cut);
  std::ofstream(b, std::ios::binary) << whole.substr(cut);
}

size_t count_occurrences(const std::string& hay, const std::string& needle) {
  size_t n = 0;
  for (size_t at = hay.find(needle); at != std::string::npos; at = hay.find(needle, at + 1)) ++n;
  return n;
}

// The data every test uses, generated once for the suite. Generated from
// SetUp, not SetUpTestSuite: a failure there must fail the tests, not skip them.
class Cli : public ::testing::Test {
 protected:
  void SetUp() override {
    if (dir_) return;
    dir_ = new testing::TempDir();
    const CmdResult g = run_cli("gen-data --out " + dir_->file("train.svm") + " --test-out " + dir_->file("test.svm") +
                      " --examples 20000 --test-examples 4000 --features 4096 --nnz 12 --seed 5 --weights-out " +
                      dir_->file("planted.w"));
    ASSERT_EQ(g.status, 0) << g.out;
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  static testing::TempDir* dir_;
};
testing::TempDir* Cli::dir_ = nullptr;

TEST_F(Cli, HelpListsTheDocumentedFlags) {
  const CmdResult r = run_cli("train --help");
  EXPECT_EQ(r.status, 0);
  for (const char* flag : {"--train", "--test", "--model", "--epochs", "--threads", "--lr", "--l2", "--format",
                           "--predictions", "--save-model", "--cache", "--skip-bad-lines"})
    EXPECT_TRUE(contains(r.out, flag)) << flag << " missing from:\n" << r.out;
  EXPECT_EQ(run_cli("--help").status, 0);
  EXPECT_TRUE(contains(run_cli("--version").out, "parafab"));
}

TEST_F(Cli, BadFlagsFailWithAMessage) {
  CmdResult r = run_cli("train --train " + dir_->file("train.svm") + " --model nope");
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_TRUE(contains(r.out, "--model")) << r.out;
  r = run_cli("train --train /nonexistent/file.svm");
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_TRUE(contains(r.out, "/nonexistent/file.svm")) << r.out;
  r = run_cli("train --train " + dir_->file("train.svm") + " --predictions " + dir_->file("p"));
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_TRUE(contains(r.out, "--predictions needs --test")) << r.out;
  EXPECT_EQ(run_cli("no-such-command").status, 2);
  EXPECT_EQ(run_cli("train --no-such-flag").status, 2);
}

// No command, or `bench` without its case: the list to choose from, not only
// "A subcommand is required". A missing flag of a command is still named.
TEST_F(Cli, AMissingSubcommandListsTheSubcommands) {
  CmdResult r = run_cli("");
  EXPECT_EQ(r.status, 2) << r.out;
  for (const char* want : {"Subcommands:", "train ", "launch ", "parafab: give one of the subcommands above"}) {
    EXPECT_TRUE(contains(r.out, want)) << want << "\n" << r.out;
  }
  r = run_cli("bench");
  EXPECT_EQ(r.status, 2) << r.out;
  for (const char* want : {"kernels ", "fabric ", "kv ", "parafab bench: give one of the subcommands above"}) {
    EXPECT_TRUE(contains(r.out, want)) << want << "\n" << r.out;
  }
  r = run_cli("train");
  EXPECT_NE(r.status, 0);
  EXPECT_TRUE(contains(r.out, "--train is required")) << r.out;
  EXPECT_FALSE(contains(r.out, "give one of the subcommands")) << r.out;
}

// `parafab info` names the providers with their capabilities. Both local
// providers do one-sided RMA here (tests/rdma/endpoint_rma_test.cpp runs it
// on both); a provider reports only the capabilities asked for, so info must
// ask for FI_RMA to see it (it said "rma no" before).
TEST_F(Cli, InfoReportsTheLocalProvidersWithRma) {
  const CmdResult r = run_cli("info");
  EXPECT_EQ(r.status, 0) << r.out;
  for (const std::string provider : {"tcp;ofi_rxm", "shm"}) {
    std::istringstream lines(r.out);
    std::string line, found;
    while (std::getline(lines, line)) {
      if (line.rfind("provider " + provider + " ", 0) == 0) found = line;
    }
    EXPECT_TRUE(contains(found, "available")) << provider << "\n" << r.out;
    EXPECT_TRUE(contains(found, "rma yes")) << provider << "\n" << r.out;
  }
}

// A number out of range is named with its flag in a line a user can read
// (CLI11's own message printed the largest double in 309 digits), and a bad
// training option is refused before the data is read: with a malformed first
// line, the error must be about the flag, not about the file.
TEST_F(Cli, NumbersOutOfRangeAreNamedBeforeTheDataIsRead) {
  CmdResult r = run_cli("train --train " + dir_->file("train.svm") + " --threads 0");
  EXPECT_EQ(r.status, 2);  // a usage error, as parafab's own checks give (not CLI11's 105)
  EXPECT_TRUE(contains(r.out, "--threads: 0 is not a positive number")) << r.out;
  EXPECT_FALSE(contains(r.out, "1797693134862315")) << r.out;
  r = run_cli("train --train " + dir_->file("train.svm") + " --epochs -1");
  EXPECT_TRUE(contains(r.out, "--epochs: -1 is not a number >= 0")) << r.out;
  r = run_cli("bench kv --seconds nan");
  EXPECT_NE(r.status, 0);
  EXPECT_TRUE(contains(r.out, "--seconds: nan is not a number")) << r.out;

  const std::string bad = dir_->file("bad_first_line.svm");
  std::ofstream(bad) << "1 x:1\n1 2:1\n";
  for (const std::string flags : {"--lr -1", "--lr nan", "--l2 -0.5"}) {
    r = run_cli("train --train " + bad + " " + flags);
    EXPECT_EQ(r.status, 2) << flags << "\n" << r.out;
    EXPECT_TRUE(contains(r.out, flags.substr(0, 4))) << flags << "\n" << r.out;
    EXPECT_FALSE(contains(r.out, "bad_first_line.svm:1")) << flags << "\n" << r.out;
  }
}

// A file written at the end (a model, predictions, a benchmark's JSON) into
// a directory that does not exist, or over a directory, is refused when the
// flags are read: before the data is parsed or the benchmark runs, not after.
TEST_F(Cli, OutputFilesThatCannotBeWrittenAreRefusedBeforeAnyWork) {
  const std::string train = " --train " + dir_->file("train.svm") + " --test " + dir_->file("test.svm");
  const std::string missing = dir_->file("no_such_dir") + "/";
  struct Case {
    std::string args, message;
  };
  const Case cases[] = {
      {"train" + train + " --save-model " + missing + "m.pfm",
       "--save-model: " + missing + "m.pfm: directory " + dir_->file("no_such_dir") + " does not exist"},
      {"train" + train + " --predictions " + missing + "p.txt", "--predictions: " + missing + "p.txt: directory"},
      {"train" + train + " --save-model " + dir_->path().string(), "--save-model: " + dir_->path().string() + " is a directory"},
      {"train" + train + " --cache " + missing + "c.pfc", "--cache: " + missing + "c.pfc: directory"},
      {"predict --model " + dir_->file("planted.w") + " --data " + dir_->file("test.svm") + " --out " + missing + "x",
       "--out: " + missing + "x: directory"},
      {"gen-data --examples 10 --out " + dir_->file("g.svm") + " --weights-out " + missing + "w",
       "--weights-out: " + missing + "w: directory"},
      {"bench kernels --json " + missing + "k.json", "--json: " + missing + "k.json: directory"},
  };
  for (const Case& c : cases) {
    const CmdResult r = run_cli(c.args);
    EXPECT_NE(r.status, 0) << c.args << "\n" << r.out;
    EXPECT_TRUE(contains(r.out, c.message)) << c.args << "\n" << r.out;
    EXPECT_FALSE(contains(r.out, "parsed")) << c.args << "\n" << r.out;
    EXPECT_FALSE(contains(r.out, "MB/s")) << c.args << "\n" << r.out;
  }
  EXPECT_FALSE(std::ifstream(dir_->file("g.svm")).good()) << "gen-data wrote before refusing --weights-out";


  // A directory nobody may write, root included: /proc/sys here. A new file
  // there is refused; an existing one given as --cache (read when valid, as
  // a cache built once on read-only shared storage) passes the flag check
  // and is then judged as a cache.
  if (::access("/proc/sys/kernel", W_OK) == 0) GTEST_SKIP() << "/proc/sys/kernel is writable here";
  CmdResult r = run_cli("train --train " + dir_->file("train.svm") + " --save-model /proc/sys/kernel/m.pfm");
  EXPECT_NE(r.status, 0);
  EXPECT_TRUE(contains(r.out, "--save-model: /proc/sys/kernel/m.pfm: directory /proc/sys/kernel is not writable"))
      << r.out;
  r = run_cli("train --train " + dir_->file("train.svm") + " --epochs 1 --quiet --cache /proc/sys/kernel/ostype");
  EXPECT_FALSE(contains(r.out, "--cache:")) << r.out;
}

// An output that is an input, or another output, is refused before any
// work, and the input is left as it was: --cache, --predictions or
// --save-model given the data's own path by mistake used to replace it.
TEST_F(Cli, OutputsThatAreInputsAreRefusedBeforeAnyWork) {
  const std::string train_file = dir_->file("train.svm"), test_file = dir_->file("test.svm");
  const std::string train = " --train " + train_file + " --test " + test_file;
  const std::string before = read_file(train_file), test_before = read_file(test_file);
  struct Case {
    std::string args, message;
  };
  const Case cases[] = {
      {"train" + train + " --cache " + train_file, "--cache " + train_file + " is the file --train reads"},
      {"train" + train + " --save-model " + train_file, "--save-model " + train_file + " is the file --train reads"},
      {"train" + train + " --predictions " + test_file, "--predictions " + test_file + " is the file --test reads"},
      {"train" + train + " --predictions " + dir_->file("x") + " --save-model " + dir_->file("x"),
       "--predictions " + dir_->file("x") + " is also --save-model's file"},
      {"predict --model " + dir_->file("planted.w") + " --data " + test_file + " --out " + test_file,
       "--out " + test_file + " is the file --data reads"},
      {"predict --model " + dir_->file("planted.w") + " --data " + test_file + " --out " + dir_->file("planted.w"),
       "--out " + dir_->file("planted.w") + " is the file --model reads"},
  };
  for (const Case& c : cases) {
    const CmdResult r = run_cli(c.args);
    EXPECT_EQ(r.status, 2) << c.args << "\n" << r.out;
    EXPECT_TRUE(contains(r.out, c.message)) << c.args << "\n" << r.out;
    EXPECT_FALSE(contains(r.out, "parsed")) << c.args << "\n" << r.out;
  }
  EXPECT_EQ(read_file(train_file), before);
  EXPECT_EQ(read_file(test_file), test_before);
}

// Training on no examples is an error naming the file, not a run that
// reports metrics of nothing.
TEST_F(Cli, ATrainingFileWithoutExamplesIsAnError) {
  const std::string empty = dir_->file("empty.svm"), comments = dir_->file("comments.svm");
  std::ofstream(empty).flush();
  std::ofstream(comments) << "# a header\n\n# nothing else\n";
  for (const std::string& f : {empty, comments}) {
    for (const std::string model : {"lr", "fm"}) {
      const CmdResult r = run_cli("train --train " + f + " --model " + model);
      EXPECT_EQ(r.status, 1) << f << " " << model << "\n" << r.out;
      EXPECT_TRUE(contains(r.out, f + ": no examples to train on")) << r.out;
      EXPECT_FALSE(contains(r.out, "holds no examples")) << r.out;  // one message for one fact
      EXPECT_FALSE(contains(r.out, "log loss")) << r.out;
    }
  }
  const std::string bad = dir_->file("all_bad.svm");
  std::ofstream(bad) << "x 1:1\n1 y:2\n";
  const CmdResult r = run_cli("train --train " + bad + " --skip-bad-lines");
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_TRUE(contains(r.out, "skipped 2 bad line(s)")) << r.out;
  EXPECT_TRUE(contains(r.out, bad + ": no examples to train on (every line was")) << r.out;
}

// --threads defaults to PARAFAB_THREADS (what launch gives each local
// worker), else to the CPUs this process may use: one under taskset -c 0.
TEST_F(Cli, TheThreadCountComesFromTheEnvironmentOrTheAffinityMask) {
  const std::string train = "train --train " + dir_->file("train.svm") + " --epochs 1 --quiet";
  CmdResult r = run_cli(train, "PARAFAB_THREADS=1 ");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_TRUE(contains(r.out, "threads 1, ")) << r.out;
  r = run_cli(train, "PARAFAB_THREADS=3 ");
  EXPECT_TRUE(contains(r.out, "threads 3, ")) << r.out;
  r = run_cli(train, "taskset -c 0 ");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_TRUE(contains(r.out, "threads 1, ")) << r.out;
  r = run_cli(train + " --threads 2", "PARAFAB_THREADS=1 ");  // the flag wins
  EXPECT_TRUE(contains(r.out, "threads 2, ")) << r.out;
  r = run_cli(train, "PARAFAB_THREADS=many taskset -c 0 ");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_TRUE(contains(r.out, "warning: PARAFAB_THREADS=many is not a positive integer; ignored")) << r.out;
  EXPECT_EQ(count_occurrences(r.out, "PARAFAB_THREADS=many"), 1u) << r.out;
  EXPECT_TRUE(contains(r.out, "threads 1, ")) << r.out;
}

TEST_F(Cli, TrainPredictAndSavedModelAgree) {
  const std::string pred = dir_->file("train.pred"), model = dir_->file("m.pfm");
  const CmdResult t = run_cli("train --train " + dir_->file("train.svm") + " --test " + dir_->file("test.svm") +
                    " --epochs 2 --threads 2 --quiet --predictions " + pred + " --save-model " + model +
                    " --planted " + dir_->file("planted.w") + " --cache " + dir_->file("train.pfc"));
  ASSERT_EQ(t.status, 0) << t.out;
  EXPECT_TRUE(contains(t.out, "held-out (4000 examples): log loss")) << t.out;
  EXPECT_TRUE(contains(t.out, "AUC")) << t.out;
  EXPECT_TRUE(contains(t.out, "planted")) << t.out;
  EXPECT_EQ(count_lines(read_file(pred)), 4000u);
  // The held-out file is read once, not again for the metrics.
  EXPECT_EQ(count_occurrences(t.out, "test " + dir_->file("test.svm") + " ("), 1u) << t.out;

  const std::string pred2 = dir_->file("predict.pred");
  const CmdResult p = run_cli("predict --model " + model + " --data " + dir_->file("test.svm") + " --out " + pred2);
  ASSERT_EQ(p.status, 0) << p.out;
  EXPECT_EQ(read_file(pred), read_file(pred2)) << "train --predictions and predict must agree";

  // Probabilities in (0, 1).
  std::istringstream in(read_file(pred));
  double x;
  while (in >> x) ASSERT_TRUE(x > 0 && x < 1) << x;

  // Second run maps the cache instead of parsing.
  const CmdResult again = run_cli("train --train " + dir_->file("train.svm") + " --epochs 1 --quiet --cache " +
                        dir_->file("train.pfc"));
  ASSERT_EQ(again.status, 0) << again.out;
  EXPECT_TRUE(contains(again.out, "mapped")) << again.out;
}

// Gzipped training and held-out files (gzip is essential on Debian) train
// and predict exactly as their text does.
TEST_F(Cli, GzippedFilesTrainAndPredictAsTheirText) {
  for (const char* f : {"train.svm", "test.svm"}) {
    const std::string cmd = "gzip -c " + dir_->file(f) + " > " + dir_->file(std::string(f) + ".gz");
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  }
  auto train = [&](const std::string& suffix, const std::string& pred) {
    return run_cli("train --train " + dir_->file("train.svm" + suffix) + " --test " + dir_->file("test.svm" + suffix) +
                   " --epochs 1 --threads 1 --quiet --predictions " + pred);
  };
  const CmdResult plain = train("", dir_->file("plain.pred"));
  const CmdResult gz = train(".gz", dir_->file("gz.pred"));
  ASSERT_EQ(plain.status, 0) << plain.out;
  ASSERT_EQ(gz.status, 0) << gz.out;
  EXPECT_TRUE(contains(gz.out, "held-out (4000 examples)")) << gz.out;
  EXPECT_EQ(read_file(dir_->file("gz.pred")), read_file(dir_->file("plain.pred")));
  EXPECT_EQ(count_lines(read_file(dir_->file("gz.pred"))), 4000u);

  // A cut file names itself and what is wrong with it.
  const std::string gzipped = read_file(dir_->file("train.svm.gz"));
  const std::string cut = dir_->file("cut.svm.gz");
  std::ofstream(cut, std::ios::binary) << gzipped.substr(0, gzipped.size() / 2);
  const CmdResult r = run_cli("train --train " + cut + " --epochs 1 --quiet");
  EXPECT_NE(r.status, 0);
  EXPECT_TRUE(contains(r.out, cut + ": the gzip data ends before its stream does")) << r.out;
}

// --train with several files (a glob of a data set's parts) trains on their
// rows one file after another, exactly as on the file they were cut from;
// --cache is then a directory of one cache per file.
TEST_F(Cli, SeveralTrainingFilesTrainAsTheirConcatenation) {
  const std::string whole = read_file(dir_->file("train.svm"));
  // Three parts cut at line ends: 7000, 8000 and 5000 lines, the last gzipped.
  auto line_start = [&](size_t line) {
    size_t at = 0;
    for (size_t i = 0; i < line; ++i) at = whole.find('\n', at) + 1;
    return at;
  };
  const size_t cut1 = line_start(7000), cut2 = line_start(15000);
  const std::string a = dir_->file("part-a.svm"), b = dir_->file("part-b.svm"), c = dir_->file("part-c.svm.gz");
  std::ofstream(a, std::ios::binary) << whole.substr(0, cut1);
  std::ofstream(b, std::ios::binary) << whole.substr(cut1, cut2 - cut1);
  std::ofstream(dir_->file("part-c.svm"), std::ios::binary) << whole.substr(cut2);
  ASSERT_EQ(std::system(("gzip -c " + dir_->file("part-c.svm") + " > " + c).c_str()), 0);
  const std::string test = " --test " + dir_->file("test.svm") + " --epochs 2 --threads 1 --quiet --predictions ";

  const CmdResult one = run_cli("train --train " + dir_->file("train.svm") + test + dir_->file("one.pred"));
  ASSERT_EQ(one.status, 0) << one.out;
  const std::string cache = dir_->file("part-caches");
  const CmdResult parts = run_cli("train --train " + a + " " + b + " --train " + c + test + dir_->file("parts.pred") +
                                  " --cache " + cache);
  ASSERT_EQ(parts.status, 0) << parts.out;
  EXPECT_TRUE(contains(parts.out, "train: 3 files, 20000 examples")) << parts.out;
  EXPECT_EQ(read_file(dir_->file("parts.pred")), read_file(dir_->file("one.pred")));
  EXPECT_EQ(count_lines(read_file(dir_->file("parts.pred"))), 4000u);

  // The second run maps the three caches, and trains the same model.
  const CmdResult again = run_cli("train --train " + a + " " + b + " " + c + test + dir_->file("again.pred") +
                                  " --cache " + cache);
  ASSERT_EQ(again.status, 0) << again.out;
  EXPECT_EQ(count_occurrences(again.out, "mapped in"), 3u) << again.out;
  EXPECT_TRUE(contains(again.out, cache + "/part-c.svm.gz.pfc")) << again.out;
  EXPECT_EQ(read_file(dir_->file("again.pred")), read_file(dir_->file("one.pred")));

  // Refused as bad flags (status 2) before any parse: a cache file for
  // several files, two files of one name, files of two formats.
  CmdResult r = run_cli("train --train " + a + " " + b + " --cache " + dir_->file("train.svm"));
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_TRUE(contains(r.out, "--cache " + dir_->file("train.svm") + ": a file, but 2 --train files need a directory"))
      << r.out;
  EXPECT_FALSE(contains(r.out, "parafab train: model")) << r.out;
  std::filesystem::create_directory(dir_->file("other"));
  std::ofstream(dir_->file("other/part-a.svm")) << "1 1:1\n";
  r = run_cli("train --train " + a + " " + dir_->file("other/part-a.svm") + " --cache " + cache);
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_TRUE(contains(r.out, a + " and " + dir_->file("other/part-a.svm") + " are both named part-a.svm")) << r.out;
  const std::string criteo = dir_->file("day.tsv");
  std::ofstream(criteo) << "1\t1\t2\t3\t4\t5\t6\t7\t8\t9\t10\t11\t12\t13"
                           "\ta\tb\tc\td\te\tf\t1\t2\t3\t4\t5\t6\t7\t8\t9\t0\taa\tbb\tcc\tdd\tee\tff\t11\t22\t33\t44\n";
  r = run_cli("train --train " + a + " " + criteo);
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_TRUE(contains(r.out, a + " reads as libsvm but " + criteo + " as criteo")) << r.out;

  // Files that hold no example between them: one error for the set.
  const std::string e1 = dir_->file("empty-1.svm"), e2 = dir_->file("empty-2.svm");
  std::ofstream(e1).flush();
  std::ofstream(e2) << "# nothing\n";
  r = run_cli("train --train " + e1 + " " + e2);
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_TRUE(contains(r.out, "no examples to train on in any of the 2 files")) << r.out;
}

// --test and predict --data with several files: one set, predicted in the
// files' order, as the file they were cut from.
TEST_F(Cli, SeveralHeldOutFilesArePredictedInTheirOrder) {
  const std::string a = dir_->file("test-a.svm"), b = dir_->file("test-b.svm");
  split_lines(dir_->file("test.svm"), 4, a, b);
  const std::string model = dir_->file("heldout.pfm");
  const std::string train = "train --train " + dir_->file("train.svm") + " --epochs 1 --threads 1 --quiet";
  const CmdResult one = run_cli(train + " --test " + dir_->file("test.svm") + " --predictions " +
                                dir_->file("heldout-one.pred") + " --save-model " + model);
  ASSERT_EQ(one.status, 0) << one.out;
  const CmdResult two = run_cli(train + " --test " + a + " " + b + " --predictions " + dir_->file("heldout-two.pred"));
  ASSERT_EQ(two.status, 0) << two.out;
  EXPECT_TRUE(contains(two.out, "test: 2 files, 4000 examples")) << two.out;
  EXPECT_TRUE(contains(two.out, "held-out (4000 examples)")) << two.out;
  EXPECT_EQ(read_file(dir_->file("heldout-two.pred")), read_file(dir_->file("heldout-one.pred")));

  const CmdResult p = run_cli("predict --model " + model + " --data " + a + " " + b + " --out " +
                              dir_->file("heldout-predict.pred"));
  ASSERT_EQ(p.status, 0) << p.out;
  EXPECT_EQ(read_file(dir_->file("heldout-predict.pred")), read_file(dir_->file("heldout-one.pred")));
}

// --partition over several files: with at least as many files as workers
// each worker reads whole files (a compressed one is decompressed once, not
// by every worker), the largest first to the least loaded; with fewer, its
// byte range of every file. Either way the job trains on every row once.
TEST_F(Cli, PartitionedWorkersReadWholeFilesOrTheirPartOfEach) {
  const std::string whole = read_file(dir_->file("train.svm"));
  const size_t third = whole.find('\n', whole.size() / 3) + 1, half = whole.find('\n', whole.size() / 2) + 1;
  const std::string a = dir_->file("p-a.svm"), b = dir_->file("p-b.svm"), c = dir_->file("p-c.svm");
  std::ofstream(a, std::ios::binary) << whole.substr(0, third);      // 1/3 of the bytes
  std::ofstream(b, std::ios::binary) << whole.substr(third, half - third);  // 1/6
  std::ofstream(c, std::ios::binary) << whole.substr(half);          // 1/2
  auto launch = [&](int workers, const std::string& files) {
    return run_cli("launch --servers 1 --workers " + std::to_string(workers) + " -- " + bin() + " train --train " +
                       files + " --epochs 1 --threads 1 --partition --quiet",
                   "FI_TCP_IFACE=lo ");
  };
  // 3 files, 2 workers: c (the largest) to worker 0, a then b to worker 1.
  CmdResult r = launch(2, a + " " + b + " " + c);
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_TRUE(contains(r.out, "train part 1/2: 1 file (whole, of 3)")) << r.out;
  EXPECT_TRUE(contains(r.out, "train part 2/2: 2 files (whole, of 3)")) << r.out;
  EXPECT_TRUE(contains(r.out, "train part 1/2 " + c + " (libsvm)")) << r.out;
  for (const std::string& f : {a, b}) EXPECT_TRUE(contains(r.out, "train part 2/2 " + f + " (libsvm)")) << r.out;
  EXPECT_TRUE(contains(r.out, "job: 20000 examples by 2 workers")) << r.out;
  // 2 files, 3 workers: a third of each file each.
  r = launch(3, a + " " + c);
  ASSERT_EQ(r.status, 0) << r.out;
  for (const char* part : {"train part 1/3: 2 files,", "train part 2/3: 2 files,", "train part 3/3: 2 files,"}) {
    EXPECT_TRUE(contains(r.out, part)) << r.out;
  }
  EXPECT_EQ(count_occurrences(r.out, "train part 2/3 " + c + " (libsvm)"), 1u) << r.out;
  EXPECT_TRUE(contains(r.out, "job: " + std::to_string(count_lines(read_file(a)) + count_lines(read_file(c))) +
                                  " examples by 3 workers"))
      << r.out;
}

// A held-out set of one class has no AUC; the line says so instead of "nan".
TEST_F(Cli, AOneClassHeldOutSetHasNoAuc) {
  const std::string test = dir_->file("positives.svm");
  std::ofstream(test) << "1 1:1 2:1\n1 3:1\n1 4:1\n";
  const CmdResult r = run_cli("train --train " + dir_->file("train.svm") + " --test " + test + " --epochs 1 --quiet");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_TRUE(contains(r.out, "held-out (3 examples): log loss ")) << r.out;
  EXPECT_TRUE(contains(r.out, "  AUC n/a (one class)  accuracy ")) << r.out;
  EXPECT_FALSE(contains(r.out, "nan")) << r.out;
}

// A held-out set of no examples has no metrics: the line and --metrics-out
// say so (null), rather than a log loss of 0 and an accuracy of nan; with
// --planted too. fm reports the same way.
TEST_F(Cli, AnEmptyHeldOutSetHasNoMetrics) {
  const std::string test = dir_->file("empty.svm");
  std::ofstream(test) << "# nothing\n";
  const std::string metrics = dir_->file("m.jsonl");
  CmdResult r = run_cli("train --train " + dir_->file("train.svm") + " --test " + test + " --planted " +
                        dir_->file("planted.w") + " --epochs 1 --quiet --metrics-out " + metrics);
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_TRUE(contains(r.out, "held-out (0 examples): no metrics")) << r.out;
  EXPECT_TRUE(contains(r.out, "planted  (0 examples): no metrics")) << r.out;
  EXPECT_FALSE(contains(r.out, "nan")) << r.out;
  r = run_cli("train --model fm --train " + dir_->file("train.svm") + " --test " + test +
              " --epochs 1 --quiet --metrics-out " + metrics);
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_TRUE(contains(r.out, "held-out (0 examples): no metrics")) << r.out;
  EXPECT_TRUE(contains(read_file(metrics), R"("examples": 0, "log_loss": null, "auc": null, "accuracy": null)"))
      << read_file(metrics);
}

// Data whose keys the model never saw predicts the bias alone: predict says
// so (a warning when it is every key, a note with the count otherwise).
TEST_F(Cli, PredictNamesKeysTheModelNeverSaw) {
  const std::string model = dir_->file("unseen.pfm"), out = dir_->file("unseen.pred");
  ASSERT_EQ(run_cli("train --train " + dir_->file("train.svm") + " --epochs 1 --quiet --save-model " + model).status, 0);
  const std::string alien = dir_->file("alien.svm"), mixed = dir_->file("mixed.svm");
  std::ofstream(alien) << "1 99999991:1\n0 99999992:1 99999993:1\n";
  std::ofstream(mixed) << "1 1:1 99999991:1\n";
  CmdResult r = run_cli("predict --model " + model + " --data " + alien + " --out " + out);
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_TRUE(contains(r.out, "warning: none of the 3 --data nonzeros has a key or field seen in training")) << r.out;
  r = run_cli("predict --model " + model + " --data " + mixed + " --out " + out);
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_TRUE(contains(r.out, "note: 1 of the 2 --data nonzeros have keys or fields never seen in training")) << r.out;
  r = run_cli("predict --model " + model + " --data " + dir_->file("test.svm") + " --out " + out);
  EXPECT_FALSE(contains(r.out, "warning: none of")) << r.out;
}

// A short job token works, with a warning from the scheduler (the MAC's
// inputs travel in clear, so a short token can be guessed offline).
TEST_F(Cli, TheSchedulerWarnsOfAShortToken) {
  const std::string shortish = dir_->file("short.tok"), good = dir_->file("good.tok");
  std::ofstream(shortish) << "tok\n";
  std::ofstream(good) << std::string(32, 'k') << "\n";
  const std::string run = "scheduler --servers 1 --workers 1 --port 0 --join-timeout 0.2 --token-file ";
  CmdResult r = run_cli(run + shortish);
  EXPECT_TRUE(contains(r.out, "warning: the job token in " + shortish + " is 3 bytes")) << r.out;
  EXPECT_TRUE(contains(r.out, "join timeout")) << r.out;  // it ran
  r = run_cli(run + good);
  EXPECT_FALSE(contains(r.out, "warning: the job token")) << r.out;
}

// Flags a model has no use for are refused, not silently ignored.
TEST_F(Cli, FlagsAModelDoesNotUseAreRefused) {
  const std::string train = "train --train " + dir_->file("train.svm") + " --epochs 1 --quiet ";
  const std::pair<std::string, std::string> cases[] = {
      {"--model lr --optimizer ftrl --classes 3", "--classes: lr and svm are binary"},
      {"--model fm --optimizer sgd", "--optimizer sgd: for lr and svm"},
      {"--model dnn --optimizer sgd", "--optimizer sgd: for lr and svm"},
      {"--model dnn --l2 0.1", "--l2: --model dnn has no L2 term"},
      {"--model lr --optimizer ftrl --l2 0.1", "--l2: lr with ftrl takes --ftrl-l2"},
  };
  for (const auto& [flags, message] : cases) {
    const CmdResult r = run_cli(train + flags);
    EXPECT_EQ(r.status, 2) << flags << "\n" << r.out;
    EXPECT_TRUE(contains(r.out, message)) << flags << "\n" << r.out;
  }
  EXPECT_EQ(run_cli(train + "--model fm --l2 0.001").status, 0);
}

TEST_F(Cli, MalformedInputNamesFileAndLineOrIsCountedWithTheFlag) {
  const std::string bad = dir_->file("bad.svm");
  std::ofstream(bad) << "1 1:1 2:1\n-1 3:1\n1 4:x\n-1 5:1\n";
  CmdResult r = run_cli("train --train " + bad + " --epochs 1");
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_TRUE(contains(r.out, bad + ":3:")) << r.out;
  r = run_cli("train --train " + bad + " --epochs 1 --skip-bad-lines");
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_TRUE(contains(r.out, "skipped 1 bad line")) << r.out;
  EXPECT_TRUE(contains(r.out, "3 examples")) << r.out;

  // A cache built while skipping serves skipping runs only: without the flag
  // the bad line stops the run as if there were no cache.
  const std::string cache = dir_->file("bad.pfc");
  r = run_cli("train --train " + bad + " --epochs 1 --skip-bad-lines --cache " + cache);
  ASSERT_EQ(r.status, 0) << r.out;
  r = run_cli("train --train " + bad + " --epochs 1 --skip-bad-lines --cache " + cache);
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_TRUE(contains(r.out, "mapped")) << r.out;
  EXPECT_TRUE(contains(r.out, "skipped 1 bad line")) << r.out;
  r = run_cli("train --train " + bad + " --epochs 1 --cache " + cache);
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_TRUE(contains(r.out, bad + ":3:")) << r.out;

  // A damaged cache (its magic intact: cut after 20 bytes) is rebuilt from
  // the text, and the run says why; a file that is no cache is not replaced.
  const std::string whole_cache = read_file(cache);
  std::ofstream(cache) << "not a cache";
  r = run_cli("train --train " + bad + " --epochs 1 --skip-bad-lines --cache " + cache);
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_TRUE(contains(r.out, cache + ": this file is not a parafab binary cache, so it is not replaced")) << r.out;
  EXPECT_EQ(read_file(cache), "not a cache");
  std::ofstream(cache, std::ios::binary | std::ios::trunc) << whole_cache.substr(0, 20);
  r = run_cli("train --train " + bad + " --epochs 1 --skip-bad-lines --cache " + cache);
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_TRUE(contains(r.out, "train " + bad + ": rebuilt the cache " + cache + ": it cannot be used: ")) << r.out;
  EXPECT_TRUE(contains(r.out, "parsed and cached")) << r.out;
  r = run_cli("train --train " + bad + " --epochs 1 --skip-bad-lines --cache " + cache);
  EXPECT_TRUE(contains(r.out, "mapped")) << r.out;
  EXPECT_FALSE(contains(r.out, "rebuilt the cache")) << r.out;
}

TEST_F(Cli, CorruptModelIsRefused) {
  const std::string m = dir_->file("corrupt.pfm");
  std::ofstream(m) << "this is not a model";
  const CmdResult r = run_cli("predict --model " + m + " --data " + dir_->file("test.svm") + " --out " + dir_->file("x"));
  EXPECT_EQ(r.status, 1);
  EXPECT_TRUE(contains(r.out, m)) << r.out;
}

TEST_F(Cli, GenDataIsDeterministic) {
  const CmdResult a = run_cli("gen-data --out " + dir_->file("g1.svm") + " --examples 3000 --features 500 --nnz 5 --seed 9 --threads 1");
  const CmdResult b = run_cli("gen-data --out " + dir_->file("g2.svm") + " --examples 3000 --features 500 --nnz 5 --seed 9 --threads 2");
  ASSERT_EQ(a.status, 0) << a.out;
  ASSERT_EQ(b.status, 0) << b.out;
  EXPECT_EQ(read_file(dir_->file("g1.svm")), read_file(dir_->file("g2.svm")));
  EXPECT_EQ(count_lines(read_file(dir_->file("g1.svm"))), 3000u);
  EXPECT_EQ(run_cli("gen-data --out " + dir_->file("g3.svm") + " --nnz 0").status, 2);
}

}  // namespace
}  // namespace parafab
