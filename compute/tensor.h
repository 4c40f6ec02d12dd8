// tensor.h — a contiguous, row-major block of device memory with a shape and a dtype.
//
// A Tensor does not know how to compute; it is a handle that Backend ops read and write.
// Memory comes from the DeviceAllocator of its device and is returned when the last Tensor
// sharing it (views included) goes away. Views (view(), reshape()) share storage, so a flat
// parameter buffer can be handed out as per-layer tensors without copies.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "compute/dtype.h"
#include "compute/error.h"
#include "compute/memory.h"

namespace carousel {

using Shape = std::vector<std::int64_t>;

std::int64_t numel(const Shape& shape);
std::string shape_str(const Shape& shape);  // "[3,64]"

class Tensor {
 public:
  Tensor() = default;

  // Uninitialised tensor on the allocator's device.
  static Tensor empty(DeviceAllocator& allocator, Shape shape, DType dtype);

  bool defined() const { return storage_ != nullptr; }
  const Shape& shape() const { return shape_; }
  std::int64_t dim(int i) const { return shape_.at(i < 0 ? shape_.size() + i : i); }
  int rank() const { return static_cast<int>(shape_.size()); }
  DType dtype() const { return dtype_; }
  std::int64_t numel() const { return carousel::numel(shape_); }
  std::size_t nbytes() const { return numel() * dtype_size(dtype_); }
  DeviceAllocator& device() const;  // the allocator (and so the device) this tensor lives on

  // As a matrix: rows = product of all but the last dimension, cols = last dimension.
  std::int64_t rows() const {
    std::int64_t r = 1;
    for (std::size_t i = 0; i + 1 < shape_.size(); ++i) r *= shape_[i];
    return r;
  }
  std::int64_t cols() const { return shape_.empty() ? 1 : shape_.back(); }

  void* raw() const { return static_cast<char*>(storage_->ptr) + offset_bytes_; }
  template <class T>
  T* data() const {
    CAROUSEL_ASSERT(dtype_ == dtype_of<T>(), "tensor holds {} but was read as {}",
                    dtype_name(dtype_), dtype_name(dtype_of<T>()));
    return static_cast<T*>(raw());
  }

  // A contiguous sub-block starting `offset` elements in, with the given shape; shares storage.
  Tensor view(std::int64_t offset, Shape shape) const;
  // Same elements, another shape of equal numel; shares storage.
  Tensor reshape(Shape shape) const;
  // Rows [begin, end) of the leading dimension; shares storage.
  Tensor slice(std::int64_t begin, std::int64_t end) const;

  std::string describe() const;  // "float32[3,64] on cpu:0"
  // The same elements without sharing ownership: the memory goes when the owners' last handle
  // does, whatever happens to this one. For a captured step's recorded ops (step_graph.h), whose
  // buffers the graph keeps or the caller owns.
  Tensor borrowed() const;

 private:
  struct Storage {
    void* ptr = nullptr;
    std::size_t bytes = 0;
    DeviceAllocator* allocator = nullptr;
    bool owned = true;  // false: borrowed(), the memory is someone else's to free
    ~Storage();
  };
  std::shared_ptr<Storage> storage_;
  std::size_t offset_bytes_ = 0;
  Shape shape_;
  DType dtype_ = DType::F32;
};

}  // namespace carousel
