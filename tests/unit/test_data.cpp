// Data: seeded tasks are deterministic, shards partition the global batch, errors are clear.
#include <catch2/catch.hpp>

#include "common/errors.h"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>

#include "core/data/sampler.h"
#include "core/data/task.h"

namespace test_data {

using namespace mgpu::data;

using mgpu::testing::error_of;

namespace {

// Empirical conditional entropy H(next | current) in nats over a batch.
double bigram_entropy(const Batch& b) {
  std::map<int32_t, std::map<int32_t, int64_t>> counts;
  for (size_t i = 0; i < b.tokens.size(); ++i) counts[b.tokens[i]][b.targets[i]]++;
  double total = static_cast<double>(b.tokens.size()), h = 0;
  for (auto& [cur, nexts] : counts) {
    int64_t n_cur = 0;
    for (auto& [nxt, c] : nexts) n_cur += c;
    for (auto& [nxt, c] : nexts) h -= c / total * std::log(static_cast<double>(c) / n_cur);
  }
  return h;
}

}  // namespace

TEST_CASE("every task is deterministic in (seed, step) and varies with the step", "[data]") {
  for (std::string name : {"reverse", "modadd", "markov"}) {
    INFO(name);
    auto a = make_task(name, 42), b = make_task(name, 42), c = make_task(name, 43);
    Batch s0 = a->sample(0, 8, 32);
    CHECK(s0 == b->sample(0, 8, 32));
    CHECK(s0 != a->sample(1, 8, 32));
    CHECK(s0 != c->sample(0, 8, 32));
    REQUIRE(s0.tokens.size() == 8 * 32);
    for (int32_t t : s0.tokens) CHECK((t >= 0 && t < a->vocab_size()));
    // targets are the next tokens: tokens shifted by one inside each row
    for (int r = 0; r < 8; ++r)
      for (int t = 0; t + 1 < 32; ++t) CHECK(s0.targets[r * 32 + t] == s0.tokens[r * 32 + t + 1]);
  }
}

TEST_CASE("reverse and modadd produce their patterns", "[data]") {
  ReverseTask rev(1, 10, 4);
  Batch b = rev.sample(0, 1, 9);  // x1..x4 SEP x4..x1
  CHECK(b.tokens[4] == rev.separator());
  for (int i = 0; i < 4; ++i) CHECK(b.tokens[5 + i] == b.tokens[3 - i]);

  ModAddTask add(1, 7);
  Batch m = add.sample(3, 4, 12);
  for (int r = 0; r < 4; ++r)
    for (int e = 0; e < 2; ++e) {
      const int32_t* ep = &m.tokens[r * 12 + e * 6];
      CHECK(ep[1] == add.plus());
      CHECK(ep[3] == add.equals());
      CHECK(ep[4] == (ep[0] + ep[2]) % 7);
      CHECK(ep[5] == add.end());
    }
}

TEST_CASE("markov text is far more predictable than uniform", "[data]") {
  MarkovTask task(7, 64, 4);
  Batch b = task.sample(0, 64, 128);
  double uniform = std::log(64.0);
  CHECK(task.mean_transition_entropy() < std::log(4.0) + 1e-9);
  CHECK(bigram_entropy(b) < 0.5 * uniform);
}

TEST_CASE("unknown task names the valid ones", "[data]") {
  std::string msg = error_of([] { make_task("sorting", 1); });
  CHECK(msg == "unknown task 'sorting': valid tasks are reverse, modadd, markov, text");
}

TEST_CASE("text loader reads bytes and rejects bad files", "[data]") {
  auto dir = std::filesystem::temp_directory_path();
  auto path = (dir / "mgpu_test_data_text.txt").string();
  {
    std::ofstream f(path, std::ios::binary);
    f << "hello world, this is a tiny corpus for a byte-level model.";
  }
  TaskOptions opts;
  opts.path = path;
  opts.seq_len = 16;
  auto task = make_task("text", 5, opts);
  CHECK(task->vocab_size() == 256);
  Batch b = task->sample(0, 4, 16);
  std::string corpus = "hello world, this is a tiny corpus for a byte-level model.";
  for (int r = 0; r < 4; ++r) {
    std::string row(b.tokens.begin() + r * 16, b.tokens.begin() + r * 16 + 16);
    CHECK(corpus.find(row) != std::string::npos);
  }
  CHECK(b == task->sample(0, 4, 16));

  opts.seq_len = 1000;
  CHECK_THAT(error_of([&] { make_task("text", 5, opts); }),
             Catch::StartsWith("cannot read data file '" + path + "': it has"));
  std::filesystem::remove(path);

  opts.path = (dir / "mgpu_no_such_file.txt").string();
  CHECK_THAT(error_of([&] { make_task("text", 5, opts); }),
             Catch::StartsWith("--data '" + opts.path + "' does not exist"));
  { std::ofstream f(path); }
  opts.path = path;
  CHECK(error_of([&] { make_task("text", 5, opts); }) ==
        "cannot read data file '" + path + "': the file is empty");
  std::filesystem::remove(path);
}

TEST_CASE("shards partition the global batch for any rank count", "[data]") {
  auto task = make_task("markov", 3);
  const int global_batch = 12;  // divisible by 1, 2, 3, 4
  for (int world : {1, 2, 3, 4}) {
    INFO("world " << world);
    for (int64_t step : {0, 5}) {
      std::vector<Batch> shards;
      for (int r = 0; r < world; ++r)
        shards.push_back(ShardedSampler(*task, global_batch, 16, r, world).shard(step));
      Batch global = ShardedSampler(*task, global_batch, 16, 0, world).global(step);
      CHECK(check_shards_partition(global, shards) == "");
      CHECK(shards[0].B == global_batch / world);
    }
  }
}

TEST_CASE("the partition check catches every rank taking shard 0", "[data]") {
  auto task = make_task("reverse", 3);
  Batch global = task->sample(2, 8, 16);
  std::vector<Batch> buggy;
  for (int r = 0; r < 4; ++r)  // the planted bug: rank r ignores r
    buggy.push_back(ShardedSampler(*task, 8, 16, 0, 4).shard(2));
  CHECK_THAT(check_shards_partition(global, buggy), Catch::Contains("same rows as rank 0"));

  std::vector<Batch> too_few = {global.rows(0, 4)};
  CHECK(check_shards_partition(global, too_few) != "");
  std::vector<Batch> swapped = {global.rows(4, 8), global.rows(0, 4)};
  CHECK(check_shards_partition(global, swapped) != "");
}

TEST_CASE("divisibility errors suggest batches that work", "[data]") {
  auto task = make_task("modadd", 1);
  CHECK(error_of([&] { ShardedSampler(*task, 10, 8, 0, 4); }) ==
        "global batch 10 is not divisible by 4 ranks: use a batch of 8 or 12");
  CHECK(error_of([&] { ShardedSampler(*task, 3, 8, 0, 4); }) ==
        "global batch 3 is not divisible by 4 ranks: use a batch of 4");
  Batch b = task->sample(0, 10, 8);
  CHECK(error_of([&] { split_micro_batches(b, 4); }) ==
        "global batch 10 is not divisible by 4 micro-batches: use a batch of 8 or 12");
}

TEST_CASE("micro-batches are consecutive rows of the batch", "[data]") {
  auto task = make_task("markov", 9);
  Batch b = task->sample(1, 8, 10);
  auto micro = split_micro_batches(b, 4);
  REQUIRE(micro.size() == 4);
  CHECK(check_shards_partition(b, micro) == "");
  CHECK(micro[1] == b.rows(2, 4));
}

}  // namespace test_data
