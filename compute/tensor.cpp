// tensor.cpp — Tensor storage lifetime, views and descriptions.
#include "compute/tensor.h"

#include <fmt/ranges.h>

namespace carousel {

std::int64_t numel(const Shape& shape) {
  std::int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

std::string shape_str(const Shape& shape) { return fmt::format("[{}]", fmt::join(shape, ",")); }

Tensor::Storage::~Storage() {
  if (allocator && owned) allocator->deallocate(ptr, bytes);
}

Tensor Tensor::empty(DeviceAllocator& allocator, Shape shape, DType dtype) {
  for (auto d : shape) {
    CAROUSEL_CHECK(d >= 0, "cannot create a tensor of shape {}: dimensions must be >= 0",
                   shape_str(shape));
  }
  Tensor t;
  t.shape_ = std::move(shape);
  t.dtype_ = dtype;
  t.storage_ = std::make_shared<Storage>();
  t.storage_->bytes = t.nbytes();
  try {
    t.storage_->ptr = allocator.allocate(t.storage_->bytes);
  } catch (const OutOfMemoryError& e) {
    // The allocator knows bytes; the tensor's shape and dtype say which buffer of the model
    // did not fit (weights, an activation, the logits).
    throw e.allocating(fmt::format("a {}{} tensor", dtype_name(t.dtype_), shape_str(t.shape_)));
  }
  t.storage_->allocator = &allocator;
  return t;
}

Tensor Tensor::borrowed() const {
  Tensor t = *this;
  if (defined()) t.storage_ = std::make_shared<Storage>(Storage{storage_->ptr, storage_->bytes,
                                                                storage_->allocator, false});
  return t;
}

DeviceAllocator& Tensor::device() const {
  CAROUSEL_ASSERT(defined(), "undefined tensor has no device");
  return *storage_->allocator;
}

Tensor Tensor::view(std::int64_t offset, Shape shape) const {
  CAROUSEL_ASSERT(defined(), "view of an undefined tensor");
  const std::int64_t n = carousel::numel(shape);
  CAROUSEL_CHECK(offset >= 0 && offset + n <= numel(),
                 "view of {} elements at offset {} does not fit in tensor {}", n, offset,
                 describe());
  Tensor t = *this;
  t.offset_bytes_ += offset * dtype_size(dtype_);
  t.shape_ = std::move(shape);
  return t;
}

Tensor Tensor::reshape(Shape shape) const {
  CAROUSEL_CHECK(carousel::numel(shape) == numel(), "cannot reshape {} to {}: {} vs {} elements",
                 describe(), shape_str(shape), numel(), carousel::numel(shape));
  return view(0, std::move(shape));
}

Tensor Tensor::slice(std::int64_t begin, std::int64_t end) const {
  CAROUSEL_CHECK(rank() >= 1 && 0 <= begin && begin <= end && end <= shape_[0],
                 "slice [{}, {}) is out of range for tensor {}", begin, end, describe());
  Shape s = shape_;
  s[0] = end - begin;
  return view(begin * carousel::numel(Shape(shape_.begin() + 1, shape_.end())), s);
}

std::string Tensor::describe() const {
  if (!defined()) return "<undefined tensor>";
  return fmt::format("{}{} on {}", dtype_name(dtype_), shape_str(shape_), device().name());
}

}  // namespace carousel
