// packing.cpp — document starts of packed sequences and their per-token RoPE rows.
#include "models/packing.h"

#include "compute/error.h"

namespace carousel {

std::vector<std::int32_t> document_starts(const std::vector<std::int32_t>& inputs,
                                          std::int64_t seq_len, std::int64_t eos_id) {
  CAROUSEL_ASSERT(seq_len > 0 && std::int64_t(inputs.size()) % seq_len == 0,
                  "{} tokens are not whole sequences of {}", inputs.size(), seq_len);
  std::vector<std::int32_t> starts(inputs.size());
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const std::int64_t t = std::int64_t(i) % seq_len;
    starts[i] = t == 0 ? 0 : inputs[i - 1] == eos_id ? std::int32_t(t) : starts[i - 1];
  }
  return starts;
}

void upload_packed_rope(Backend& be, const std::vector<float>& cos, const std::vector<float>& sin,
                        std::int64_t half, const std::vector<std::int32_t>& doc_start,
                        std::int64_t seq_len, RopeTables& packed,
                        const std::vector<std::int64_t>& mine) {
  const std::int64_t b = std::int64_t(doc_start.size()) / seq_len;
  std::vector<std::int64_t> positions = mine;  // of this rank's tokens in each sequence
  if (positions.empty()) {
    for (std::int64_t t = 0; t < seq_len; ++t) positions.push_back(t);
  }
  const auto t_mine = std::int64_t(positions.size()), n = b * t_mine;
  if (!packed.doc_start.defined()) {
    packed.doc_start = be.empty({b, t_mine}, DType::I32);
    packed.cos = be.empty({n, half}, DType::F32);
    packed.sin = be.empty({n, half}, DType::F32);
  }
  std::vector<std::int32_t> starts(static_cast<std::size_t>(n));
  std::vector<float> c(static_cast<std::size_t>(n * half)), s(static_cast<std::size_t>(n * half));
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int64_t t = positions[std::size_t(i % t_mine)];
    const std::int32_t start = doc_start[std::size_t(i / t_mine * seq_len + t)];
    const std::int64_t pos = t - start;  // in its document
    starts[std::size_t(i)] = start;
    std::copy_n(cos.begin() + pos * half, half, c.begin() + i * half);
    std::copy_n(sin.begin() + pos * half, half, s.begin() + i * half);
  }
  be.upload(starts.data(), packed.doc_start);
  be.upload(c.data(), packed.cos);
  be.upload(s.data(), packed.sin);
}

}  // namespace carousel
