// data_order.h — which dataset and which window each global sequence reads: weighted mixing of
// several datasets and deterministic shuffling (docs/training.md#mixing-and-shuffling).
//
// Everything is a pure function of the global sequence number g (= step * B + j), the weights
// and the seed, in integer arithmetic: a resumed run, another mesh, another thread count or CPU
// reads exactly the same tokens, and the data position a checkpoint needs is its step.
//
// Written by hand: the order is a few integer formulas; a data-pipeline library (Grain,
// torchdata) would bring a Python runtime into a C++ trainer.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace carousel {

// One entry of dataset_path: `PATH[,WEIGHT]` entries separated by ';' (MaxText's
// grain_train_files form), spaces around them ignored. Text after an entry's last comma that
// starts like a number (a digit, '+', '-', '.') is its weight and must be a positive finite
// number; otherwise the comma is part of the path. A single entry without weight is the path.
struct DatasetEntry {
  std::string path;
  double weight = 1;
};
std::vector<DatasetEntry> parse_dataset_entries(const char* key, const std::string& value);

// Mixing: the weights become integer counts c_d (exact for integers up to 10^6, else in units
// of 1/10000 of the total, at least 1, reduced by their gcd); a cycle of C = sum c_d <= 2^20
// global sequences holds c_d of dataset d, interleaved as evenly as possible (smooth weighted
// round robin). Global sequence g is dataset d's sequence k = (g / C) * c_d + (its rank among
// d's slots of the cycle).
class DataMixture {
 public:
  explicit DataMixture(const std::vector<double>& weights);
  struct Pick {
    int dataset;
    std::int64_t sequence;  // the dataset's own sequence number
  };
  Pick pick(std::int64_t g) const;
  const std::vector<std::int64_t>& counts() const { return counts_; }
  std::int64_t cycle() const { return std::int64_t(cycle_.size()); }
  double share(int dataset) const;  // c_d / C: the fraction of sequences it gets

 private:
  struct Slot {
    std::int32_t dataset, rank;  // rank among that dataset's slots of the cycle
  };
  std::vector<std::int64_t> counts_;
  std::vector<Slot> cycle_;
};

// SplitMix64's finaliser: a well-mixed 64-bit hash of x (the synthetic data and the shuffles).
std::uint64_t splitmix64(std::uint64_t x);

// A permutation of [0, n) chosen by `key`: a 4-round Feistel network over the smallest even
// power of two >= n, walking the cycle until the value is < n. Each epoch of a dataset uses
// its own key, so sequence k reads window permute(k mod W, key(seed, dataset, k / W)).
std::int64_t permute(std::int64_t i, std::int64_t n, std::uint64_t key);
std::uint64_t shuffle_key(std::int64_t seed, int dataset, std::int64_t epoch);

}  // namespace carousel
