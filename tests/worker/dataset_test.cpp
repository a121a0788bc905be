// append_rows: several data sets joined are the data set of their texts
// joined, for whole sets, empty ones, and views that start past row 0.
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "tests/worker/test_util.h"
#include "worker/data_reader.h"
#include "worker/dataset.h"

namespace parafab::worker {
namespace {

using test::expect_same_view;

Dataset parse(const std::string& text) { return parse_text_dataset(text, "text", ReadOptions{}); }

const std::string kA = "1 3:0.5 7:1.5\n0 2:2\n1\n";            // an empty row among them
const std::string kB = "0 9:1 9:2 4:-1\n";                     // a repeated key
const std::string kC = "1 1:1\n0 5:0.25 6:0.75\n1 8:3\n";

TEST(AppendRows, JoinedSetsAreTheJoinedTexts) {
  DatasetArrays all;
  for (const std::string* t : {&kA, &kB, &kC}) append_rows(all, parse(*t).view());
  const Dataset joined(std::move(all));
  const Dataset whole = parse(kA + kB + kC);
  ASSERT_EQ(joined.rows(), 7u);
  expect_same_view(joined.view(), whole.view());
}

TEST(AppendRows, EmptySetsAddNothing) {
  DatasetArrays all;
  append_rows(all, parse("").view());
  append_rows(all, parse(kB).view());
  append_rows(all, parse("# only a comment\n\n").view());
  const Dataset joined(std::move(all));
  expect_same_view(joined.view(), parse(kB).view());

  DatasetArrays none;
  none.row_ptr.clear();  // not even the leading 0: append_rows adds it
  append_rows(none, parse("").view());
  ASSERT_EQ(none.row_ptr, std::vector<uint64_t>{0});
  EXPECT_TRUE(none.labels.empty());
}

// A view of rows 1.. of a set: its row_ptr starts at the row's offset, not 0.
TEST(AppendRows, AViewPastTheFirstRowIsRebased) {
  const Dataset c = parse(kC);
  const DatasetView v = c.view();
  const DatasetView tail{v.labels.subspan(1), v.row_ptr.subspan(1), v.keys, v.values};
  DatasetArrays all;
  append_rows(all, parse(kA).view());
  append_rows(all, tail);
  const Dataset joined(std::move(all));
  expect_same_view(joined.view(), parse(kA + "0 5:0.25 6:0.75\n1 8:3\n").view());
}

TEST(AppendRows, AViewWhoseArraysDisagreeIsRefused) {
  const Dataset a = parse(kA);
  const DatasetView v = a.view();
  DatasetArrays all;
  // row_ptr one short of the labels.
  EXPECT_THROW(append_rows(all, DatasetView{v.labels, v.row_ptr.first(v.row_ptr.size() - 1), v.keys, v.values}),
               std::invalid_argument);
  // keys shorter than row_ptr says.
  EXPECT_THROW(append_rows(all, DatasetView{v.labels, v.row_ptr, v.keys.first(1), v.values.first(1)}),
               std::invalid_argument);
  // values not as long as keys.
  EXPECT_THROW(append_rows(all, DatasetView{v.labels, v.row_ptr, v.keys, v.values.first(1)}), std::invalid_argument);
  EXPECT_TRUE(all.labels.empty());
  EXPECT_TRUE(all.keys.empty());
}

}  // namespace
}  // namespace parafab::worker
