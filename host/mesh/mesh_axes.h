// mesh_axes.h — the mesh as an ordered list of named axes: a rank's coordinate on each axis, the
// rank of a coordinate, and a rank's group (and its place in it) over any set of axes. One
// mixed-radix formula serves every axis and every group; host/mesh/mesh.h gives the axes
// their sizes and the communicators their axes.
//
// Header-only (a few integer loops): host/runtime/ is near its cap of source files.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string_view>

#include "compute/error.h"
#include "models/placement.h"

namespace carousel {

// The axes of the mesh, slowest first: rank numbers count the last one fastest (mesh.h says why
// this order and how it maps to nodes). One enum with the parameters' placements
// (models/placement.h), which say where a parameter lives on each of these axes.
using Axis = MeshAxis;
inline constexpr int kMeshAxes = 6;

// "replica", "expert", ... for messages and tests.
constexpr std::string_view axis_name(Axis a) {
  constexpr std::array<std::string_view, kMeshAxes> names = {"replica", "expert",  "stage",
                                                             "fsdp",    "context", "tensor"};
  return names[std::size_t(a)];
}

// A set of axes. It has no order of its own: a group's ranks are always ordered by the mesh's
// order of the axes, so {Replica, Context} and {Context, Replica} are the same group.
class Axes {
 public:
  constexpr Axes(std::initializer_list<Axis> axes) {
    for (const Axis a : axes) bits_ |= bit(a);
  }
  static constexpr Axes all() { return Axes((1u << kMeshAxes) - 1); }
  constexpr bool has(Axis a) const { return (bits_ & bit(a)) != 0; }
  constexpr Axes complement() const { return Axes(~bits_ & all().bits_); }
  constexpr bool operator==(const Axes&) const = default;

 private:
  constexpr explicit Axes(unsigned bits) : bits_(bits) {}
  static constexpr unsigned bit(Axis a) { return 1u << unsigned(a); }
  unsigned bits_ = 0;
};

// A rank's coordinate on every axis, indexed by Axis.
using Coordinates = std::array<int, kMeshAxes>;
constexpr int coordinate(const Coordinates& c, Axis a) { return c[std::size_t(a)]; }

struct MeshAxes {
  std::array<int, kMeshAxes> sizes{1, 1, 1, 1, 1, 1};  // indexed by Axis

  int size(Axis a) const { return sizes[std::size_t(a)]; }
  // The ranks of one group spanning `axes` (all of them: the mesh's ranks).
  int size(Axes axes) const {
    int n = 1;
    for (int a = 0; a < kMeshAxes; ++a) n *= axes.has(Axis(a)) ? sizes[std::size_t(a)] : 1;
    return n;
  }
  int ranks() const { return size(Axes::all()); }

  // The coordinates `c` has on `axes`, read as one number in mesh order (slowest first). Over all
  // axes that is the rank; over a group's axes, the rank's place in its group (the group's ranks
  // agree on every other axis, so this is also their order by rank); over the other axes, which
  // group it is (one number per group, the same for all its ranks).
  int index(const Coordinates& c, Axes axes) const {
    int n = 0;
    for (int a = 0; a < kMeshAxes; ++a) {
      const std::size_t i = std::size_t(a);
      CAROUSEL_ASSERT(c[i] >= 0 && c[i] < sizes[i], "{} coordinate {} outside the axis of size {}",
                      axis_name(Axis(a)), c[i], sizes[i]);
      if (axes.has(Axis(a))) n = n * sizes[i] + c[i];
    }
    return n;
  }
  int rank(const Coordinates& c) const { return index(c, Axes::all()); }

  // The inverse of rank(): the last axis fastest.
  Coordinates coordinates(int rank) const {
    CAROUSEL_ASSERT(rank >= 0 && rank < ranks(), "rank {} outside a mesh of {} ranks", rank,
                    ranks());
    Coordinates c{};
    for (int a = kMeshAxes - 1; a >= 0; --a) {
      const std::size_t i = std::size_t(a);
      c[i] = rank % sizes[i];
      rank /= sizes[i];
    }
    return c;
  }
};

}  // namespace carousel
