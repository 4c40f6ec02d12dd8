// test_mesh.cpp — the decisions of host/mesh/mesh.h that the GPU path follows, checked on CPUs:
// rank placement on the named axes and the communicators split from them (against the hand-written
// formulas they replaced), and which transport (in-process, MPI, NCCL) a run uses and why, agreed
// by the processes of an mpirun job.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "compute/cpu_backend.h"
#include "host/config/config.h"
#include "host/mesh/mesh.h"
#include "host/run/device_peak.h"
#include "host/schedule/ir.h"
#include "tests/support/test_util.h"

namespace carousel {
namespace {

Config with_device(const std::string& device) {
  Config c;
  c.device = device;
  return c;
}

TEST(Mesh, RankPlacementIsFsdpFastest) {
  const MeshShape mesh{2, 3, 2};  // D, S, F
  for (int rank = 0; rank < mesh.ranks(); ++rank) {
    const RankPlace p = RankPlace::of(rank, mesh);
    EXPECT_EQ(p.rank(), rank);
    EXPECT_EQ(p.fsdp_rank, rank % 2);
    EXPECT_EQ(p.stage_rank, rank / 2 % 3);
    EXPECT_EQ(p.data_rank, rank / 6);
    EXPECT_EQ(p.batch_part(), p.data_rank * 2 + p.fsdp_rank);
  }
}

// Tensor ranks are the fastest axis (a tensor group on neighbouring devices of a node), context
// ranks the next; both share their batch part, and context ranks count as replicas.
TEST(Mesh, RankPlacementIsTensorThenContextFastest) {
  const MeshShape mesh{2, 3, 2, 4, 2};  // D, S, F, T, C
  ASSERT_EQ(mesh.ranks(), 96);
  ASSERT_EQ(mesh.replicas(), 4);
  for (int rank = 0; rank < mesh.ranks(); ++rank) {
    const RankPlace p = RankPlace::of(rank, mesh);
    EXPECT_EQ(p.rank(), rank);
    EXPECT_EQ(p.tensor_rank, rank % 4);
    EXPECT_EQ(p.context_rank, rank / 4 % 2);
    EXPECT_EQ(p.fsdp_rank, rank / 8 % 2);
    EXPECT_EQ(p.stage_rank, rank / 16 % 3);
    EXPECT_EQ(p.data_rank, rank / 48);
    EXPECT_EQ(p.batch_part(), p.data_rank * 2 + p.fsdp_rank);
    EXPECT_EQ(p.replica_rank(), p.data_rank * 2 + p.context_rank);
  }
}

// The reference for the named axes: a rank's place by the hand-inverted formulas mesh.h had
// before them (rank = (((data * S + stage) * F + fsdp) * C + context) * T + tensor, data =
// replica * E + expert).
struct HandPlace {
  int data, stage, fsdp, context, tensor;
  int replica, expert;
  std::array<int, kMeshAxes> on_axes() const {
    return {replica, expert, stage, fsdp, context, tensor};
  }
};
HandPlace by_hand(int rank, const MeshShape& m) {
  HandPlace h{};
  h.tensor = rank % m.tensor;
  h.context = rank / m.tensor % m.context;
  h.fsdp = rank / (m.tensor * m.context) % m.fsdp;
  h.stage = rank / (m.tensor * m.context * m.fsdp) % m.stages;
  h.data = rank / (m.tensor * m.context * m.fsdp * m.stages);
  h.replica = h.data / m.expert;
  h.expert = h.data % m.expert;
  return h;
}

std::string describe(const MeshShape& m) {
  return "D " + std::to_string(m.data / m.expert) + " E " + std::to_string(m.expert) + " S " +
         std::to_string(m.stages) + " F " + std::to_string(m.fsdp) + " C " +
         std::to_string(m.context) + " T " + std::to_string(m.tensor);
}

// Every mesh with each axis of size 1 to 3 (the data axis holds replica x expert ranks).
std::vector<MeshShape> small_meshes() {
  std::vector<MeshShape> out;
  for (int d = 1; d <= 3; ++d)
    for (int e = 1; e <= 3; ++e)
      for (int s = 1; s <= 3; ++s)
        for (int f = 1; f <= 3; ++f)
          for (int c = 1; c <= 3; ++c)
            for (int t = 1; t <= 3; ++t) out.push_back({d * e, s, f, t, c, e});
  return out;
}

TEST(Mesh, CoordinatesRoundTripOnEveryMesh) {
  for (const MeshShape& m : small_meshes()) {
    SCOPED_TRACE(describe(m));
    ASSERT_EQ(m.ranks(), m.data * m.stages * m.fsdp * m.context * m.tensor);
    ASSERT_EQ(m.replicas(), m.data * m.context);
    ASSERT_EQ(m.expert_replicas(), m.data / m.expert * m.context);
    for (int rank = 0; rank < m.ranks(); ++rank) {
      const RankPlace p = RankPlace::of(rank, m);
      const HandPlace h = by_hand(rank, m);
      ASSERT_EQ(p.data_rank, h.data);
      ASSERT_EQ(p.stage_rank, h.stage);
      ASSERT_EQ(p.fsdp_rank, h.fsdp);
      ASSERT_EQ(p.context_rank, h.context);
      ASSERT_EQ(p.tensor_rank, h.tensor);
      const Coordinates c = p.coordinates();
      ASSERT_EQ(c, h.on_axes());
      ASSERT_EQ(m.axes().coordinates(rank), c);
      ASSERT_EQ(p.coordinate(Axis::Expert), h.expert);
      ASSERT_EQ(m.axes().rank(c), rank);
      ASSERT_EQ(p.rank(), rank);
      ASSERT_EQ(p.batch_part(), h.data * m.fsdp + h.fsdp);
      ASSERT_EQ(p.replica_rank(), h.data * m.context + h.context);
      ASSERT_EQ(p.expert_rank(), h.data % m.expert);
      ASSERT_EQ(p.expert_replica_rank(), h.data / m.expert * m.context + h.context);
      ASSERT_EQ(p.writes_shards(), h.data == 0 && h.context == 0);
    }
  }
}

// A communicator of RankCommunicators: its axes, and the key that ordered its ranks when each
// split had its own formula (the order reductions sum in, which must not change).
struct GroupCase {
  const char* name;
  Axes axes;
  std::function<int(const HandPlace&, const MeshShape&)> old_key;
};
std::vector<GroupCase> group_cases() {
  return {
      {"pipe", mesh_group::pipe, [](const HandPlace& h, const MeshShape&) { return h.stage; }},
      {"fsdp", mesh_group::fsdp, [](const HandPlace& h, const MeshShape&) { return h.fsdp; }},
      {"data", mesh_group::data,
       [](const HandPlace& h, const MeshShape& m) { return h.data * m.context + h.context; }},
      {"tensor", mesh_group::tensor, [](const HandPlace& h, const MeshShape&) { return h.tensor; }},
      {"context", mesh_group::context,
       [](const HandPlace& h, const MeshShape&) { return h.context; }},
      {"expert", mesh_group::expert,
       [](const HandPlace& h, const MeshShape& m) { return h.data % m.expert; }},
      {"expert_data", mesh_group::expert_data,
       [](const HandPlace& h, const MeshShape& m) {
         return h.data / m.expert * m.context + h.context;
       }},
  };
}

// Brute force: whether ranks with places a and b agree on every axis `axes` leaves out.
bool agree_off(const HandPlace& a, const HandPlace& b, Axes axes) {
  const auto ca = a.on_axes(), cb = b.on_axes();
  for (int i = 0; i < kMeshAxes; ++i) {
    if (!axes.has(Axis(i)) && ca[std::size_t(i)] != cb[std::size_t(i)]) return false;
  }
  return true;
}

// The ranks of (key, rank) pairs in split()'s order: by key, then by rank.
std::vector<int> in_split_order(std::vector<std::pair<int, int>> members) {
  std::sort(members.begin(), members.end());
  std::vector<int> ranks;
  for (const auto& [key, rank] : members) ranks.push_back(rank);
  return ranks;
}

TEST(Mesh, GroupsSpanTheirAxes) {
  EXPECT_EQ(mesh_group::pipe, Axes{Axis::Stage});
  EXPECT_EQ(mesh_group::fsdp, Axes{Axis::Fsdp});
  EXPECT_EQ(mesh_group::data, (Axes{Axis::Context, Axis::Expert, Axis::Replica}));
  EXPECT_EQ(mesh_group::tensor, Axes{Axis::Tensor});
  EXPECT_EQ(mesh_group::context, Axes{Axis::Context});
  EXPECT_EQ(mesh_group::expert, Axes{Axis::Expert});
  EXPECT_EQ(mesh_group::expert_data, (Axes{Axis::Replica, Axis::Context}));
  EXPECT_EQ(Axes{Axis::Tensor}.complement(),
            (Axes{Axis::Replica, Axis::Expert, Axis::Stage, Axis::Fsdp, Axis::Context}));
  EXPECT_EQ(axis_name(Axis::Fsdp), "fsdp");
}

// What split() makes of each rank's group_split() (ranks of one colour, ordered by key then
// rank) is, on every small mesh, the ranks agreeing with it on every other axis, in the order
// the per-group formulas gave, which is rank order; a rank's place there is index_in(axes).
TEST(Mesh, GroupsAreTheRanksAgreeingOnTheOtherAxes) {
  for (const MeshShape& m : small_meshes()) {
    const int n = m.ranks();
    std::vector<HandPlace> hand;
    std::vector<RankPlace> places;
    for (int r = 0; r < n; ++r) {
      hand.push_back(by_hand(r, m));
      places.push_back(RankPlace::of(r, m));
    }
    for (const GroupCase& g : group_cases()) {
      SCOPED_TRACE(describe(m) + ", group " + g.name);
      std::vector<GroupSplit> split;
      std::map<int, std::vector<std::pair<int, int>>> by_color;
      for (int r = 0; r < n; ++r) {
        split.push_back(group_split(places[std::size_t(r)], g.axes));
        by_color[split.back().color].push_back({split.back().key, r});
      }
      for (int r = 0; r < n; ++r) {
        const std::vector<int> made = in_split_order(by_color[split[std::size_t(r)].color]);
        std::vector<std::pair<int, int>> expected;
        for (int q = 0; q < n; ++q) {
          if (agree_off(hand[std::size_t(q)], hand[std::size_t(r)], g.axes))
            expected.push_back({g.old_key(hand[std::size_t(q)], m), q});
        }
        ASSERT_EQ(made, in_split_order(expected)) << "rank " << r;
        ASSERT_TRUE(std::is_sorted(made.begin(), made.end())) << "rank " << r;
        ASSERT_EQ(int(made.size()), m.axes().size(g.axes));
        const auto at = std::find(made.begin(), made.end(), r) - made.begin();
        ASSERT_EQ(at, places[std::size_t(r)].index_in(g.axes)) << "rank " << r;
      }
    }
  }
}

// split_communicators over the in-process communicator, the special groups included: each
// communicator's ranks (all-gathered global ranks, in communicator-rank order) are the
// brute-force members in the order of the formulas before the named axes.
struct CommsCase {
  MeshShape mesh;
  schedule::Layout layout;
  int kv_heads;
  bool tied;
};

TEST(Mesh, CommunicatorsOverTheInProcessWorld) {
  using schedule::Layout;
  using schedule::Placement;
  const CommsCase cases[] = {
      // D 2 x S 2 x T 2, KV heads shared by tensor pairs, tied pair of stages 0 and 1
      {{2, 2, 1, 2, 1, 1}, Layout{.ranks = 2}, 1, true},
      // E 2 x S 3 x C 2: expert groups, tied pair of stages 0 and 2
      {{2, 3, 1, 1, 2, 2}, Layout{.ranks = 3}, 2, true},
      // D 2 x E 2 x F 2 x C 2, one stage: no tie
      {{4, 1, 2, 1, 2, 2}, Layout{.ranks = 1}, 2, true},
      // S 3 x T 4 with 2 KV heads (pairs share one), V placement with layers outside: every stage
      {{1, 3, 1, 4, 1, 1},
       Layout{.ranks = 3, .repeats = 2, .placement = Placement::V, .outside = true},
       2,
       true},
      // V placement: the first and last stage on one rank, no tie group
      {{2, 2, 1, 1, 1, 1}, Layout{.ranks = 2, .repeats = 2, .placement = Placement::V}, 2, true},
      {{3, 2, 2, 1, 1, 1}, Layout{.ranks = 2}, 2, false},  // untied
  };
  for (const CommsCase& c : cases) {
    const MeshShape& m = c.mesh;
    SCOPED_TRACE(describe(m));
    ModelConfig model;
    model.num_kv_heads = c.kv_heads;
    model.logits_via_embedding = c.tied;
    const int n = m.ranks();
    // seen[rank][name]: the global ranks of each communicator the rank has, and an extra entry
    // where the rank is not at its own communicator rank in them.
    std::vector<std::map<std::string, std::vector<int>>> seen{std::size_t(n)};
    const LocalWorld world(n);
    run_ranks(
        n,
        [&](int rank) {
          const auto comm = world.communicator(rank);
          CpuBackend be(rank);
          const RankCommunicators comms =
              split_communicators(*comm, RankPlace::of(rank, m), c.layout, model);
          auto& mine = seen[std::size_t(rank)];
          auto record = [&](const std::string& name, Communicator* group) {
            if (!group) return;
            const Tensor own = be.from_host(std::vector<std::int32_t>{rank}, {1});
            Tensor all = be.zeros({group->size()}, DType::I32);
            group->all_gather(own, all).wait();
            const std::vector<std::int32_t> ranks = be.to_host<std::int32_t>(all);
            mine[name] = std::vector<int>(ranks.begin(), ranks.end());
            if (ranks[std::size_t(group->rank())] != rank) mine[name + " (own place)"] = {-1};
          };
          record("pipe", comms.pipe.get());
          record("fsdp", comms.fsdp.get());
          record("data", comms.data.get());
          record("tensor", comms.tensor.get());
          record("kv_share", comms.kv_share.get());
          record("context", comms.context.get());
          record("expert", comms.expert.get());
          record("expert_data", comms.expert_data.get());
          record("tie", comms.tie.get());
        },
        &world);
    // The reference: brute force over the hand-written places.
    const int first = 0, last = c.layout.rank_of(c.layout.stages() - 1);
    const int kv = c.kv_heads < m.tensor ? m.tensor / c.kv_heads : 1;
    const bool tie_group = c.tied && m.stages > 1 && (c.layout.outside || first != last);
    for (int r = 0; r < n; ++r) {
      const HandPlace me = by_hand(r, m);
      std::map<std::string, std::vector<int>> expected;
      auto members = [&](const std::string& name, Axes axes, auto&& also, auto&& old_key) {
        std::vector<std::pair<int, int>> list;
        for (int q = 0; q < n; ++q) {
          const HandPlace h = by_hand(q, m);
          if (agree_off(h, me, axes) && also(h)) list.push_back({old_key(h), q});
        }
        expected[name] = in_split_order(list);
      };
      const auto any = [](const HandPlace&) { return true; };
      for (const GroupCase& g : group_cases()) {
        const bool experts_only =
            g.name == std::string("expert") || g.name == std::string("expert_data");
        if (experts_only && m.expert == 1) continue;
        members(g.name, g.axes, any, [&](const HandPlace& h) { return g.old_key(h, m); });
      }
      if (kv > 1) {
        members(
            "kv_share", Axes{Axis::Tensor},
            [&](const HandPlace& h) { return h.tensor / kv == me.tensor / kv; },
            [](const HandPlace& h) { return h.tensor; });
      }
      const auto holds = [&](const HandPlace& h) {
        return c.layout.outside || h.stage == first || h.stage == last;
      };
      if (tie_group && holds(me)) {
        members("tie", Axes{Axis::Stage}, holds,
                [&](const HandPlace& h) { return h.stage == first ? 0 : 1; });
      }
      EXPECT_EQ(seen[std::size_t(r)], expected) << "rank " << r;
    }
  }
}

struct TransportCase {
  std::string device;
  int ranks;
  MachineView machine;
  Transport expected;
  std::string reason_words;
};

TEST(Mesh, TransportFollowsDevicesGpusAndLaunch) {
  const TransportCase cases[] = {
      {"cpu", 1, {0, false, 1, 1}, Transport::Local, "one CPU device"},
      {"cpu", 4, {8, true, 1, 1}, Transport::Local, "threads of this process on CPU"},
      {"cpu", 4, {0, false, 4, 4}, Transport::Mpi, "mpirun processes on CPU"},
      {"auto", 4, {0, true, 1, 1}, Transport::Local, "CPU devices"},     // auto without a GPU
      {"cuda", 1, {1, true, 1, 1}, Transport::Local, "one GPU device"},  // one GPU: no NCCL
      {"cuda", 2, {2, true, 1, 1}, Transport::Nccl, "2 rank(s) on 2 visible GPU(s)"},
      {"cuda", 8, {8, true, 1, 1}, Transport::Nccl, "one GPU each"},
      {"auto", 4, {1, true, 1, 1}, Transport::Local, "4 ranks on 1 visible GPU(s)"},
      {"cuda", 2, {2, false, 1, 1}, Transport::Local, "this build has no NCCL"},
      {"cuda", 16, {8, true, 16, 8}, Transport::Nccl, "bootstrapped over MPI"},
  };
  for (const auto& c : cases) {
    const TransportChoice choice = choose_transport(with_device(c.device), c.ranks, c.machine);
    EXPECT_EQ(choice.transport, c.expected) << c.device << " x" << c.ranks << ": " << choice.reason;
    EXPECT_NE(choice.reason.find(c.reason_words), std::string::npos) << choice.reason;
  }
}

TEST(Mesh, TransportRefusesWhatCannotRun) {
  auto message = [](const std::string& device, int ranks, MachineView machine) {
    try {
      choose_transport(with_device(device), ranks, machine);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message("cuda", 1, {0, true, 1, 1}).find("no GPU is visible"), std::string::npos);
  EXPECT_NE(message("cuda", 4, {4, false, 4, 4}).find("needs the NCCL communicator"),
            std::string::npos);
  // A tensor group must not span nodes: 6 processes on this node cannot hold groups of 4.
  Config tensor4 = with_device("cpu");
  tensor4.ici_tensor_parallelism = 4;
  const std::string spans = testing::error_of([&] {
    choose_transport(tensor4, 12, {0, false, 12, 6});
  });
  EXPECT_NE(spans.find("ici_tensor_parallelism=4 but this node runs 6 of the job's 12 processes"),
            std::string::npos)
      << spans;
  EXPECT_EQ(choose_transport(tensor4, 16, {0, false, 16, 8}).transport, Transport::Mpi);
  EXPECT_EQ(choose_transport(tensor4, 4, {0, false, 1, 1}).transport, Transport::Local);
  const std::string too_many = message("cuda", 16, {8, true, 16, 16});
  EXPECT_NE(too_many.find("16 processes on this node but it has 8 visible GPU(s)"),
            std::string::npos)
      << too_many;
}

// Under mpirun the processes exchange their choices first: a job whose nodes differ fails on
// every process with one message (4 processes as threads over the in-process communicator).
TEST(Mesh, ProcessesThatChooseDifferentlyAllFail) {
  auto outcome = [](const std::string& device, const std::vector<int>& gpus_per_process) {
    const int n = int(gpus_per_process.size());
    LocalWorld world(n);
    std::vector<std::string> messages(std::size_t(n), "no error");
    run_ranks(n, [&](int p) {
      const auto processes = world.communicator(p);
      const MachineView machine{gpus_per_process[std::size_t(p)], true, n, 1};
      try {
        const TransportChoice agreed =
            agree_on_transport(with_device(device), n, machine, *processes);
        messages[std::size_t(p)] = "agreed on " + std::string(transport_name(agreed.transport));
      } catch (const Error& e) {
        messages[std::size_t(p)] = e.what();
      }
    });
    return messages;
  };
  // GPUs on the first two nodes only, device=auto: the same error everywhere.
  const std::vector<std::string> mixed = outcome("auto", {1, 1, 0, 0});
  for (const std::string& m : mixed) {
    EXPECT_EQ(m, mixed[0]);
    EXPECT_NE(m.find("NCCL on GPUs on process(es) 0, 1; MPI on CPUs on process(es) 2, 3"),
              std::string::npos)
        << m;
  }
  // device=cuda and process 3 sees no GPU: its own reason there, the others name it.
  const std::vector<std::string> missing = outcome("cuda", {1, 1, 1, 0});
  EXPECT_NE(missing[3].find("no GPU is visible"), std::string::npos) << missing[3];
  for (int p = 0; p < 3; ++p) {
    EXPECT_NE(missing[std::size_t(p)].find("process(es) 3 of this mpirun job cannot run with "
                                           "device=cuda"),
              std::string::npos)
        << missing[std::size_t(p)];
  }
  // Agreement: every process goes on with the common choice.
  for (const std::string& m : outcome("auto", {0, 0, 0})) EXPECT_EQ(m, "agreed on MPI on CPUs");
  for (const std::string& m : outcome("cuda", {1, 1})) EXPECT_EQ(m, "agreed on NCCL on GPUs");
}

}  // namespace
}  // namespace carousel

namespace carousel {
namespace {

// Ranks share the cores; OMP_NUM_THREADS may ask for fewer threads, never for more than the
// share (ranks x threads <= cores).
TEST(Mesh, ThreadsPerRankNeverOversubscribe) {
  const char* saved = std::getenv("OMP_NUM_THREADS");
  const std::string before = saved ? saved : "";
  const int cores = omp_get_num_procs();
  unsetenv("OMP_NUM_THREADS");
  EXPECT_EQ(threads_per_rank(1), cores);
  EXPECT_EQ(threads_per_rank(2 * cores), 1);
  setenv("OMP_NUM_THREADS", "1", 1);
  EXPECT_EQ(threads_per_rank(1), 1);
  setenv("OMP_NUM_THREADS", "100000", 1);
  EXPECT_EQ(threads_per_rank(1), cores);
  setenv("OMP_NUM_THREADS", "4,2", 1);  // a nested list: not a count, the share stands
  EXPECT_EQ(threads_per_rank(1), cores);
  if (saved) {
    setenv("OMP_NUM_THREADS", before.c_str(), 1);
  } else {
    unsetenv("OMP_NUM_THREADS");
  }
}

TEST(DevicePeak, ConfiguredMeasuredAndSharedCores) {
  CpuBackend be;
  Config c;
  c.peak_flops = 2e12;
  EXPECT_EQ(run_peak_flops(c, be, 4, true, 1), 8e12);  // a given peak counts every device
  c.peak_flops = 0;
  const double one = device_peak_flops(c, be);  // a measured GEMM: positive, below 10 TFLOP/s
  EXPECT_GT(one, 1e8);
  EXPECT_LT(one, 1e13);
  // Threads of one process share its cores: never more devices at once than cores / threads.
  const int threads = omp_get_max_threads();
  // Two measurements on a loaded machine may differ by 2x or more: the bound only has to tell
  // min(devices, cores) x one from 1000 x one.
  const double many = run_peak_flops(c, be, 1000, true, 1);
  EXPECT_LE(many, one * 4 * omp_get_num_procs());
  EXPECT_EQ(omp_get_max_threads(), threads);  // measured with 1 thread, the count restored
}

}  // namespace
}  // namespace carousel
