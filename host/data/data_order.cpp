// data_order.cpp — dataset_path's entries, the mixing cycle, the shuffling permutation.
#include "host/data/data_order.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <numeric>
#include <string_view>

#include "compute/error.h"

namespace carousel {

namespace {

constexpr std::int64_t kWeightUnits = 10000;               // resolution of non-integer weights
constexpr std::int64_t kMaxCycle = std::int64_t(1) << 20;  // 8 MiB of slots at most

std::string trimmed(const std::string& text) {
  const auto first = text.find_first_not_of(" \t");
  if (first == std::string::npos) return "";
  return text.substr(first, text.find_last_not_of(" \t") - first + 1);
}

// Text after an entry's last comma that starts like a number is its weight (and must be one);
// anything else belongs to the path.
bool looks_like_weight(const std::string& text) {
  return text.empty() || std::isdigit(static_cast<unsigned char>(text[0])) ||
         std::string_view("+-.").find(text[0]) != std::string_view::npos || text == "inf" ||
         text == "nan";
}

}  // namespace

std::vector<DatasetEntry> parse_dataset_entries(const char* key, const std::string& value) {
  std::vector<DatasetEntry> entries;
  std::size_t begin = 0;
  while (true) {
    const std::size_t end = value.find(';', begin);
    std::string item = trimmed(value.substr(begin, end == std::string::npos ? end : end - begin));
    DatasetEntry e;
    const std::size_t comma = item.rfind(',');
    const std::string weight = comma == std::string::npos ? "x" : trimmed(item.substr(comma + 1));
    if (looks_like_weight(weight)) {
      const std::string digits = !weight.empty() && weight[0] == '+' ? weight.substr(1) : weight;
      double w = 0;
      const auto [last, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), w);
      const bool number =
          !digits.empty() && ec == std::errc() && last == digits.data() + digits.size();
      CAROUSEL_CHECK(number && std::isfinite(w) && w > 0,
                     "{}: the weight of '{}' is '{}'; a weight is a positive number (PATH,WEIGHT "
                     "entries separated by ';', e.g. a/*.bin,0.7;b/*.bin,0.3; a path that itself "
                     "ends in ,NUMBER takes an explicit weight: 'my,5.bin,1')",
                     key, trimmed(item.substr(0, comma)), weight);
      e.weight = w;
      item = trimmed(item.substr(0, comma));
    }
    CAROUSEL_CHECK(!item.empty(),
                   "{}='{}' has an empty entry; give PATH or PATH,WEIGHT entries separated by ';' "
                   "(e.g. a/*.bin,0.7;b/*.bin,0.3)",
                   key, value);
    e.path = item;
    entries.push_back(e);
    if (end == std::string::npos) break;
    begin = end + 1;
  }
  return entries;
}

DataMixture::DataMixture(const std::vector<double>& weights) {
  CAROUSEL_ASSERT(!weights.empty(), "a mixture of no datasets");
  const double largest = *std::max_element(weights.begin(), weights.end());
  bool integers = true;
  double total = 0;  // of the weights scaled to the largest: no overflow near 1e308
  for (double w : weights) {
    integers = integers && w == std::floor(w) && w <= 1e6;
    total += w / largest;
  }
  std::int64_t g = 0;
  for (double w : weights) {
    const std::int64_t c =
        integers ? std::int64_t(w)
                 : std::max<std::int64_t>(1, std::llround(w / largest / total * kWeightUnits));
    counts_.push_back(c);
    g = std::gcd(g, c);
  }
  std::int64_t cycle = 0;
  for (std::int64_t& c : counts_) cycle += (c /= g);
  CAROUSEL_CHECK(cycle <= kMaxCycle,
                 "dataset_path: the weights give a mixing cycle of {} sequences, more than {}; "
                 "use smaller integer weights (their sum reduced by their gcd at most {}) or "
                 "fractions (applied in units of 1/{} of their sum)",
                 cycle, kMaxCycle, kMaxCycle, kWeightUnits);
  // Smooth weighted round robin: each slot goes to the dataset furthest behind its share.
  std::vector<std::int64_t> credit(counts_.size(), 0);
  std::vector<std::int32_t> taken(counts_.size(), 0);
  cycle_.reserve(std::size_t(cycle));
  for (std::int64_t p = 0; p < cycle; ++p) {
    std::size_t best = 0;
    for (std::size_t d = 0; d < counts_.size(); ++d) {
      credit[d] += counts_[d];
      if (credit[d] > credit[best]) best = d;
    }
    credit[best] -= cycle;
    cycle_.push_back(Slot{std::int32_t(best), taken[best]++});
  }
}

double DataMixture::share(int dataset) const {
  return double(counts_[std::size_t(dataset)]) / double(cycle_.size());
}

DataMixture::Pick DataMixture::pick(std::int64_t g) const {
  const auto cycle = std::int64_t(cycle_.size());
  const Slot slot = cycle_[std::size_t(g % cycle)];
  return Pick{slot.dataset, (g / cycle) * counts_[std::size_t(slot.dataset)] + slot.rank};
}

std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

std::int64_t permute(std::int64_t i, std::int64_t n, std::uint64_t key) {
  CAROUSEL_ASSERT(i >= 0 && i < n, "permute({}, {}): index out of range", i, n);
  CAROUSEL_ASSERT(n <= (std::int64_t(1) << 62), "permute: {} values are more than 2^62", n);
  int half = 1;
  while ((std::int64_t(1) << (2 * half)) < n) ++half;
  const std::uint64_t mask = (std::uint64_t(1) << half) - 1;
  auto x = std::uint64_t(i);
  do {  // the values >= n are walked through: the permutation of [0, 4^half) restricted to [0, n)
    std::uint64_t left = x >> half, right = x & mask;
    for (std::uint64_t round = 0; round < 4; ++round) {
      const std::uint64_t f = splitmix64(key ^ splitmix64(right + (round << 56))) & mask;
      const std::uint64_t next = left ^ f;
      left = right;
      right = next;
    }
    x = (left << half) | right;
  } while (x >= std::uint64_t(n));
  return std::int64_t(x);
}

std::uint64_t shuffle_key(std::int64_t seed, int dataset, std::int64_t epoch) {
  return splitmix64(splitmix64(splitmix64(std::uint64_t(seed)) ^ std::uint64_t(dataset)) ^
                    std::uint64_t(epoch));
}

}  // namespace carousel
