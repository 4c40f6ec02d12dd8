// test_data_order.cpp — mixing several datasets by weight, shuffled epochs, dataset_path's
// entries and their errors, and memory-mapped shards that stay out of the process's memory.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <set>

#include "host/data/data.h"
#include "host/data/data_order.h"
#include "tests/support/test_util.h"

namespace carousel {
namespace {

namespace fs = std::filesystem;

fs::path temp(const std::string& name) { return fs::temp_directory_path() / name; }

Config tokens_config(const std::string& path, std::int64_t T) {
  Config c;
  c.dataset_type = "tokens";
  c.dataset_path = path;
  c.model.max_target_length = T;
  c.model.vocab_size = 1000;
  return c;
}

// A shard holding tokens first, first + 1, ..., first + n - 1.
std::string counting_shard(const std::string& name, int first, int n) {
  std::vector<std::uint16_t> t(static_cast<std::size_t>(n));
  std::iota(t.begin(), t.end(), std::uint16_t(first));
  const std::string path = temp(name).string();
  write_token_shard(path, t);
  return path;
}

TEST(DataOrder, PermuteIsABijectionForEverySizeAndKey) {
  for (std::int64_t n : {1, 2, 3, 7, 64, 1000, 4097}) {
    for (std::uint64_t key : {0ULL, 1ULL, 0xdeadbeefULL}) {
      std::vector<std::int64_t> out;
      for (std::int64_t i = 0; i < n; ++i) out.push_back(permute(i, n, key));
      std::vector<std::int64_t> sorted = out;
      std::sort(sorted.begin(), sorted.end());
      std::vector<std::int64_t> all(static_cast<std::size_t>(n));
      std::iota(all.begin(), all.end(), 0);
      EXPECT_EQ(sorted, all) << n << " " << key;
      if (n >= 64) {  // a shuffle, not the identity, and another key another order
        std::int64_t fixed = 0;
        for (std::int64_t i = 0; i < n; ++i) fixed += out[std::size_t(i)] == i;
        EXPECT_LT(fixed, n / 8) << n << " " << key;
        EXPECT_NE(permute(0, n, key) * n + permute(1, n, key),
                  permute(0, n, key + 7) * n + permute(1, n, key + 7));
      }
    }
  }
}

// Weights become counts per cycle, each dataset's sequences are taken in turn (0, 1, 2, ...),
// every C consecutive sequences hold exactly the counts, and the minority is spread out.
TEST(DataOrder, MixtureGivesEachDatasetItsShareEvenly) {
  struct Case {
    std::vector<double> weights;
    std::vector<std::int64_t> counts;
  };
  for (const Case& c :
       {Case{{0.7, 0.3}, {7, 3}}, Case{{2, 1, 1}, {2, 1, 1}}, Case{{1.5, 1}, {3, 2}},
        Case{{5}, {1}}, Case{{1, 1}, {1, 1}}, Case{{1.5e308, 1e308}, {3, 2}}}) {
    const DataMixture mix(c.weights);
    EXPECT_EQ(mix.counts(), c.counts);
    const auto cycle = std::accumulate(c.counts.begin(), c.counts.end(), std::int64_t(0));
    std::vector<std::int64_t> next(c.counts.size(), 0);
    std::vector<int> picks;
    for (std::int64_t g = 0; g < 50 * cycle; ++g) {
      const DataMixture::Pick p = mix.pick(g);
      ASSERT_EQ(p.sequence, next[std::size_t(p.dataset)]++) << g;
      picks.push_back(p.dataset);
    }
    for (std::int64_t start = 0; start + cycle <= std::int64_t(picks.size()); start += 3) {
      for (std::size_t d = 0; d < c.counts.size(); ++d) {
        EXPECT_EQ(std::count(picks.begin() + start, picks.begin() + start + cycle, int(d)),
                  c.counts[d]);
      }
    }
  }
  // 0.7 / 0.3: dataset 1's picks are never more than 4 apart (a block of 7 then 3 would be).
  const DataMixture mix({0.7, 0.3});
  std::int64_t last = -1;
  for (std::int64_t g = 0; g < 100; ++g) {
    if (mix.pick(g).dataset != 1) continue;
    if (last >= 0) {
      EXPECT_LE(g - last, 4) << g;
    }
    last = g;
  }
}

TEST(DataOrder, DatasetEntriesAndTheirErrors) {
  auto entries = parse_dataset_entries("dataset_path", " a/*.bin , 0.7; b.bin,+3;c,d.bin;e,5.bin,1");
  ASSERT_EQ(entries.size(), 4u);
  EXPECT_EQ(entries[0].path, "a/*.bin");  // spaces around entries and weights are ignored
  EXPECT_EQ(entries[0].weight, 0.7);
  EXPECT_EQ(entries[1].path, "b.bin");
  EXPECT_EQ(entries[1].weight, 3);
  EXPECT_EQ(entries[2].path, "c,d.bin");  // a comma followed by no number is part of the path
  EXPECT_EQ(entries[2].weight, 1);
  EXPECT_EQ(entries[3].path, "e,5.bin");  // a path ending in ,NUMBER takes an explicit weight
  for (const char* bad : {"a.bin,0;b.bin,1", "a.bin,-2", "a.bin,1e400", "a.bin,", "a.bin,0x10",
                          "a.bin,nan", "a.bin,inf", "a.bin,.5.5"}) {
    const std::string msg = testing::error_of([&] { parse_dataset_entries("dataset_path", bad); });
    EXPECT_NE(msg.find("dataset_path: the weight of 'a.bin' is '"), std::string::npos) << bad;
    EXPECT_NE(msg.find("a weight is a positive number"), std::string::npos) << msg;
  }
  EXPECT_NE(testing::error_of([] { parse_dataset_entries("dataset_path", "a.bin;;b.bin"); })
                .find("dataset_path='a.bin;;b.bin' has an empty entry"),
            std::string::npos);
  Config c = tokens_config(counting_shard("carousel_mix_eval.bin", 0, 100), 4);
  for (const std::string& eval : {c.dataset_path + ";" + c.dataset_path, c.dataset_path + ",2"}) {
    c.eval_dataset_path = eval;
    EXPECT_NE(testing::error_of([&] { make_eval_data_loader(c); })
                  .find("names several datasets or a weight"),
              std::string::npos)
        << eval;
  }
  c.dataset_path += ",1;" + temp("carousel_mix_missing_*.bin").string() + ",2";
  EXPECT_NE(testing::error_of([&] { make_data_loader(c); })
                .find("carousel_mix_missing_*.bin' matches no file"),
            std::string::npos);
  EXPECT_NE(testing::error_of([] { DataMixture({1000000, 999999}); })
                .find("a mixing cycle of 1999999 sequences, more than 1048576"),
            std::string::npos);
}

// Two datasets mixed 3:1, in order: each reads its own sequences k = 0, 1, ... at (k*T) mod n.
TEST(Data, MixedDatasetsReadEachInItsOwnOrder) {
  const std::string a = counting_shard("carousel_mix_a.bin", 0, 500);
  const std::string b = counting_shard("carousel_mix_b.bin", 600, 200);
  const std::int64_t T = 8, B = 4;
  const auto loader = make_data_loader(tokens_config(a + ",3;" + b + ",1", T));
  std::int64_t k[2] = {0, 0}, from[2] = {0, 0};
  for (std::int64_t step = 0; step < 10; ++step) {
    const TokenBatch batch = loader->batch(step, B, 0, B);
    for (std::int64_t j = 0; j < B; ++j) {
      const int d = batch.inputs[std::size_t(j * T)] >= 600 ? 1 : 0;
      const std::int64_t base = d ? 600 : 0, n = d ? 200 : 500;
      const std::int64_t offset = (k[d]++ * T) % n;
      for (std::int64_t t = 0; t < T; ++t) {
        ASSERT_EQ(batch.inputs[std::size_t(j * T + t)], base + (offset + t) % n) << step << j;
        ASSERT_EQ(batch.targets[std::size_t(j * T + t)], base + (offset + t + 1) % n);
      }
      ++from[d];
    }
  }
  EXPECT_EQ(from[0], 30);
  EXPECT_EQ(from[1], 10);
}

// Shuffled: an epoch reads every window [w*T, w*T + T + 1) once, each epoch in its own order,
// the same for the same seed and another for another seed.
TEST(Data, ShuffledEpochsReadEveryWindowOnce) {
  const std::string path = counting_shard("carousel_shuffle.bin", 0, 1001);
  const std::int64_t T = 10, windows = 100;
  Config c = tokens_config(path, T);
  c.model.vocab_size = 1001;
  c.enable_data_shuffling = true;
  c.data_shuffle_seed = 3;
  const auto order = [&](const Config& cfg, std::int64_t epoch) {
    const auto loader = make_data_loader(cfg);
    const TokenBatch b = loader->batch(epoch, windows, 0, windows);  // one step = one epoch
    std::vector<std::int64_t> w;
    for (std::int64_t j = 0; j < windows; ++j) {
      const std::int32_t first = b.inputs[std::size_t(j * T)];
      EXPECT_EQ(first % T, 0);
      for (std::int64_t t = 0; t < T; ++t) {
        EXPECT_EQ(b.inputs[std::size_t(j * T + t)], first + t);
        EXPECT_EQ(b.targets[std::size_t(j * T + t)], first + t + 1);
      }
      w.push_back(first / T);
    }
    return w;
  };
  const auto e0 = order(c, 0), e1 = order(c, 1);
  for (const auto& e : {e0, e1}) {
    EXPECT_EQ(std::set<std::int64_t>(e.begin(), e.end()).size(), std::size_t(windows));
  }
  EXPECT_NE(e0, e1);
  EXPECT_EQ(order(c, 0), e0);
  Config other = c;
  other.data_shuffle_seed = 4;
  EXPECT_NE(order(other, 0), e0);
  c.enable_data_shuffling = false;  // in order: window j of step 0 is j
  std::vector<std::int64_t> in_order(static_cast<std::size_t>(windows));
  std::iota(in_order.begin(), in_order.end(), 0);
  EXPECT_EQ(order(c, 0), in_order);
}

// This process's private resident memory (RssAnon): what each process holds on its own. The
// shard's pages are in the kernel's page cache, one copy per node, dropped under memory
// pressure.
std::int64_t private_kib() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("RssAnon:", 0) == 0) return std::stoll(line.substr(8));
  }
  return -1;
}

// A 48 MiB shard of 12 M uint32 ids: opening it (every id checked against vocab_size) and
// reading shuffled batches leaves the process's private memory within 8 MiB of where it was.
// Copying the ids into the process as int32 (the loader before this one) took 48 MiB.
TEST(Data, ShardsStayOutOfTheProcess) {
  const std::string path = temp("carousel_big_mapped.bin").string();
  const std::int64_t n = 12 << 20;
  {
    std::vector<std::uint32_t> ids(static_cast<std::size_t>(n));
    for (std::int64_t i = 0; i < n; ++i) ids[std::size_t(i)] = std::uint32_t((i * 7919) % 100000);
    write_token_shard(path, ids);
  }
  const std::int64_t before = private_kib();
  ASSERT_GT(before, 0);
  Config c = tokens_config(path, 64);
  c.model.vocab_size = 100000;
  c.enable_data_shuffling = true;
  const auto loader = make_data_loader(c);
  EXPECT_EQ(loader->stream_tokens(), n);
  std::int64_t checksum = 0;
  for (std::int64_t step = 0; step < 20; ++step) {
    const TokenBatch b = loader->batch(step, 16, 0, 16);
    for (std::int32_t id : b.inputs) checksum += id;
  }
  EXPECT_GT(checksum, 0);
  const std::int64_t grown = private_kib() - before;
  EXPECT_LT(grown, 8 << 10) << "private memory grew by " << grown << " KiB";
  fs::remove(path);
}

// A shard truncated or rewritten in place while a run reads it: an error naming the file and
// what to do, never a crash (a memory map would die of SIGBUS) nor ids past the vocabulary.
TEST(Data, ShardsChangedDuringTheRunAreClearErrors) {
  const std::string path = counting_shard("carousel_changing.bin", 0, 1000);
  Config c = tokens_config(path, 16);
  c.model.vocab_size = 1000;
  const auto loader = make_data_loader(c);
  EXPECT_EQ(loader->batch(0, 4, 0, 4).inputs[17], 17);
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(1024 + 2 * 20);
    const std::uint16_t big = 60000;
    f.write(reinterpret_cast<const char*>(&big), 2);
  }
  std::string msg = testing::error_of([&] { loader->batch(0, 4, 0, 4); });
  EXPECT_NE(msg.find("token shard '" + path + "': token 60000 at position 20 is >= "
                     "vocab_size=1000"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("renaming it over the old"), std::string::npos) << msg;
  fs::resize_file(path, 1024 + 2 * 100);
  msg = testing::error_of([&] { loader->batch(10, 4, 0, 4); });  // tokens 640.. are gone
  EXPECT_NE(msg.find("dataset_path: reading tokens 640..656 of '" + path + "' failed: the file "
                     "is shorter now (was the file truncated or rewritten since the run opened "
                     "it?"),
            std::string::npos)
      << msg;
  fs::remove(path);
}

}  // namespace
}  // namespace carousel
