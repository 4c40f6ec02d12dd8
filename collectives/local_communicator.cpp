// local_communicator.cpp — rendezvous-based collectives and mailbox-based send/recv between
// threads, each rank's operations executed in issue order by its own worker thread.
#include "collectives/local_communicator.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <deque>
#include <map>
#include <optional>
#include <thread>
#include <vector>

#include "collectives/common.h"
#include "collectives/wait_timer.h"
#include "compute/error.h"

namespace carousel {

namespace detail {

// One collective instance (one sequence number) while ranks meet in it.
struct Slot {
  std::vector<std::optional<comm::Signature>> signature;  // per rank, once arrived
  std::vector<const void*> send;
  int arrived = 0, read = 0, left = 0;
  std::string error;
  std::vector<int> color, key;                          // split
  std::map<int, std::shared_ptr<LocalGroup>> children;  // split: color -> new group
};

struct P2POp {
  bool is_send;
  Tensor data;
  int self, peer;
  std::int64_t seq;  // k-th send (or receive) between this pair
  bool done = false;
  std::string error;
  Event event;
};

struct Mailbox {
  std::deque<std::shared_ptr<P2POp>> sends, recvs;
};

struct LocalGroup;

// Shared by every communicator of one LocalWorld: once a rank has failed (LocalWorld::abort),
// ranks waiting for others to arrive fail at once instead of at the timeout.
struct WorldAbort {
  std::mutex mutex;
  std::string reason;  // empty while nothing failed
  std::vector<std::weak_ptr<LocalGroup>> groups;
  std::string get() {
    std::lock_guard lock(mutex);
    return reason;
  }
};

struct LocalGroup {
  std::string name;
  int size;
  double timeout_seconds;
  double link_bytes_per_second = 0;  // LocalWorld's simulated link; 0: memory speed
  std::shared_ptr<WorldAbort> world_abort;
  std::mutex mutex;
  std::condition_variable cv;
  std::map<std::int64_t, Slot> slots;
  std::map<std::pair<int, int>, Mailbox> mailboxes;  // (src, dst)
  LocalGroup(std::string n, int s, double t, std::shared_ptr<WorldAbort> a)
      : name(std::move(n)), size(s), timeout_seconds(t), world_abort(std::move(a)) {}
  // Waits on cv until notified or until `timer` has counted the timeout; true once it has. It
  // sleeps 100 ms at most, so a pause of the whole process shows as a gap between two slices and
  // is not counted (wait_timer.h); a timeout of inf never passes.
  bool wait_slice(std::unique_lock<std::mutex>& lock, WaitTimer& timer) {
    const double left = timeout_seconds - timer.waited();
    if (left <= 0) return true;
    cv.wait_for(lock, std::chrono::duration<double>(std::min(left, 0.1)));
    return timer.waited() >= timeout_seconds;
  }
};

// A new group that a LocalWorld::abort reaches.
std::shared_ptr<LocalGroup> make_group(std::string name, int size, double timeout,
                                       std::shared_ptr<WorldAbort> abort) {
  auto group = std::make_shared<LocalGroup>(std::move(name), size, timeout, abort);
  std::lock_guard lock(abort->mutex);
  abort->groups.push_back(group);
  return group;
}

}  // namespace detail

namespace {

using comm::Signature;
using detail::LocalGroup;
using detail::make_group;
using detail::P2POp;
using detail::Slot;

// "[1, 3]": the ranks that have not arrived in a slot.
std::string missing_ranks(const Slot& slot) {
  std::vector<int> missing;
  for (std::size_t r = 0; r < slot.signature.size(); ++r) {
    if (!slot.signature[r]) missing.push_back(int(r));
  }
  return fmt::format("[{}]", fmt::join(missing, ", "));
}

class LocalCommunicator final : public Communicator {
 public:
  LocalCommunicator(std::shared_ptr<LocalGroup> group, int rank)
      : group_(std::move(group)), rank_(rank), sends_(group_->size, 0), recvs_(group_->size, 0) {}

  int rank() const override { return rank_; }
  int size() const override { return group_->size; }
  std::string name() const override { return group_->name; }

  Event do_all_gather(const Tensor& send, const Tensor& recv) override {
    return collective({"all_gather", send.numel(), send.dtype()}, send, recv);
  }
  Event do_reduce_scatter(const Tensor& send, const Tensor& recv, ReduceOp op) override {
    return collective({"reduce_scatter", recv.numel(), send.dtype(), -1, reduce_op_name(op)}, send,
                      recv, op);
  }
  Event do_all_reduce(const Tensor& send, const Tensor& recv, ReduceOp op) override {
    return collective({"all_reduce", send.numel(), send.dtype(), -1, reduce_op_name(op)}, send,
                      recv, op);
  }
  Event do_broadcast(const Tensor& send, const Tensor& recv, int root) override {
    return collective({"broadcast", send.numel(), send.dtype(), root}, send, recv);
  }
  Event barrier() override { return collective({"barrier", 0, DType::F32}, Tensor(), Tensor()); }

  void group_start() override {
    CAROUSEL_ASSERT(!in_group_, "group_start on communicator '{}' rank {}: already in a group",
                    name(), rank_);
    in_group_ = true;
  }
  Event group_end() override {
    CAROUSEL_ASSERT(in_group_, "group_end on communicator '{}' rank {} without group_start", name(),
                    rank_);
    in_group_ = false;
    auto ops = std::move(group_ops_);
    group_ops_.clear();
    std::vector<Event> events = {Event()};  // the group's, then each operation's
    for (const auto& op : ops) events.push_back(op->event);
    worker_.enqueue([this, ops] { run_p2p(ops); }, events);
    return events.front();
  }
  Event do_send(const Tensor& data, int peer) override { return p2p(true, data, peer); }
  Event do_recv(const Tensor& data, int peer) override { return p2p(false, data, peer); }

  std::unique_ptr<Communicator> split(int color, int key) override {
    const std::int64_t seq = next_seq_++;
    std::shared_ptr<LocalGroup> child;
    int child_rank = -1;
    Event done;
    worker_.enqueue([&, seq] { run_split(seq, color, key, child, child_rank); }, {done});
    done.wait();
    if (!child) return nullptr;
    return std::make_unique<LocalCommunicator>(child, child_rank);
  }

 private:
  Event collective(Signature sig, const Tensor& send, const Tensor& recv,
                   ReduceOp op = ReduceOp::Sum) {
    CAROUSEL_ASSERT(!in_group_,
                    "{} on communicator '{}' inside a send/recv group: only send and "
                    "recv may be grouped",
                    sig.op, name());
    const std::int64_t seq = next_seq_++;
    Event done;
    worker_.enqueue([this, sig, send, recv, op, seq] { run_collective(sig, send, recv, op, seq); },
                    {done});
    return done;
  }

  // Meets the other ranks in slot `seq`: everyone arrives (signatures checked), everyone reads
  // the inputs it needs, everyone has read, then the slot is left. A rank whose recv overlaps its
  // own send (in place) while other ranks still read that send stages its result in a private
  // buffer and writes recv only after everyone has read; otherwise it writes recv directly.
  void run_collective(const Signature& sig, const Tensor& send, const Tensor& recv, ReduceOp op,
                      std::int64_t seq) {
    LocalGroup& g = *group_;
    // Device memory (a GPU's) is read and written through host copies.
    const void* send_bytes = send.defined() ? host_bytes(send, send_copy_) : nullptr;
    std::unique_lock lock(g.mutex);
    Slot& slot = arrive(lock, seq, sig, send_bytes);
    lock.unlock();
    const bool device_recv = recv.defined() && !recv.device().host_accessible();
    const bool stage = device_recv || needs_staging(sig, send, recv);
    if (stage && staging_.size() < recv.nbytes()) staging_.resize(recv.nbytes());
    if (recv.defined()) {
      gather_inputs(sig, slot, op, stage ? staging_.data() : static_cast<char*>(recv.raw()));
    }
    lock.lock();
    slot.read += 1;
    g.cv.notify_all();
    wait(
        lock, slot, [&] { return slot.read == g.size; }, sig, seq, true);
    lock.unlock();
    if (stage) recv.device().copy_from_host(recv.raw(), staging_.data(), recv.nbytes());
    lock.lock();
    leave(seq, slot);
  }

  // t's bytes in host memory: t's own when the CPU can read them, else a copy into `copy`.
  static const void* host_bytes(const Tensor& t, std::vector<char>& copy) {
    if (t.device().host_accessible()) return t.raw();
    copy.resize(t.nbytes());
    t.device().copy_to_host(copy.data(), t.raw(), t.nbytes());
    return copy.data();
  }

  // dst's bytes = src's (same size), whatever device memory either lives in.
  static void copy_bytes(const Tensor& dst, const Tensor& src) {
    if (dst.device().host_accessible()) {
      src.device().copy_to_host(dst.raw(), src.raw(), src.nbytes());
    } else {
      std::vector<char> copy;
      dst.device().copy_from_host(dst.raw(), host_bytes(src, copy), src.nbytes());
    }
  }

  // Only reductions read the rank's own recv region as input while producing it; all_gather and
  // broadcast never overwrite bytes another rank still reads (the own slice is skipped).
  static bool needs_staging(const Signature& sig, const Tensor& send, const Tensor& recv) {
    if (sig.op != "all_reduce" && sig.op != "reduce_scatter") return false;
    const char* s = static_cast<const char*>(send.raw());
    const char* r = static_cast<const char*>(recv.raw());
    return s < r + recv.nbytes() && r < s + send.nbytes();
  }

  void gather_inputs(const Signature& sig, const Slot& slot, ReduceOp op, char* out) const {
    const int n = group_->size;
    const std::size_t elt = dtype_size(sig.dtype);
    const std::size_t bytes = sig.count * elt;
    if (sig.op == "all_gather") {
      for (int r = 0; r < n; ++r) {
        if (out + r * bytes != slot.send[r]) std::memcpy(out + r * bytes, slot.send[r], bytes);
      }
    } else if (sig.op == "broadcast") {
      if (out != slot.send[sig.root]) std::memcpy(out, slot.send[sig.root], bytes);
    } else if (sig.op == "all_reduce" || sig.op == "reduce_scatter") {
      const std::size_t offset = sig.op == "reduce_scatter" ? rank_ * bytes : 0;
      std::vector<const void*> inputs(n);
      for (int r = 0; r < n; ++r) inputs[r] = static_cast<const char*>(slot.send[r]) + offset;
      comm::reduce_in_rank_order(sig.dtype, op, inputs, out, sig.count);
    }
  }

  Slot& slot_for(std::int64_t seq) {  // call with the group mutex held
    Slot& slot = group_->slots[seq];
    if (slot.signature.empty()) {
      slot.signature.resize(group_->size);
      slot.send.resize(group_->size, nullptr);
      slot.color.resize(group_->size, -1);
      slot.key.resize(group_->size, 0);
    }
    return slot;
  }

  Slot& arrive(std::unique_lock<std::mutex>& lock, std::int64_t seq, const Signature& sig,
               const void* send) {
    LocalGroup& g = *group_;
    Slot& slot = slot_for(seq);
    for (int r = 0; r < g.size && slot.error.empty(); ++r) {
      if (slot.signature[r] && !(*slot.signature[r] == sig)) {
        slot.error = fmt::format(
            "collective mismatch on communicator '{}' at sequence {}: rank {} called {} but rank "
            "{} called {}",
            g.name, seq, r, slot.signature[r]->str(), rank_, sig.str());
      }
    }
    slot.signature[rank_] = sig;
    slot.send[rank_] = send;
    slot.arrived += 1;
    g.cv.notify_all();
    wait(
        lock, slot, [&] { return slot.arrived == g.size; }, sig, seq, false);
    return slot;
  }

  template <class Pred>
  void wait(std::unique_lock<std::mutex>& lock, Slot& slot, Pred done, const Signature& sig,
            std::int64_t seq, bool reading) {
    LocalGroup& g = *group_;
    WaitTimer timer;
    while (!done() && slot.error.empty()) {
      // Another rank failed: stop waiting for ranks that may never come. (Only while ranks are
      // missing: once all have arrived they are reading each other's buffers and will finish.)
      // The slot is marked abandoned too: a rank arriving after this one leaves (its arrival
      // still counted) must not go on to read this rank's buffer, which is freed as its thread
      // unwinds, nor wait for this rank to read.
      if (const std::string why = reading ? std::string() : g.world_abort->get(); !why.empty()) {
        const std::string error = fmt::format("rank {}: {} #{} on communicator '{}' abandoned: {}",
                                              rank_, sig.str(), seq, g.name, why);
        if (slot.error.empty()) slot.error = error;
        g.cv.notify_all();
        leave(seq, slot);
        throw Error(error);
      }
      if (g.wait_slice(lock, timer) && !done() && slot.error.empty()) {
        slot.error = fmt::format(
            "rank {}: {} #{} on communicator '{}' timed out after {} s waiting for {} (they have "
            "not issued it, or issued other operations first)",
            rank_, sig.str(), seq, g.name, g.timeout_seconds,
            reading ? std::string("ranks still reading") : "ranks " + missing_ranks(slot));
        g.cv.notify_all();
      }
    }
    if (!slot.error.empty()) {
      const std::string error = slot.error;
      leave(seq, slot);
      throw Error(error);
    }
  }

  void leave(std::int64_t seq, Slot& slot) {
    slot.left += 1;
    if (slot.left == group_->size) group_->slots.erase(seq);
  }

  void run_split(std::int64_t seq, int color, int key, std::shared_ptr<LocalGroup>& child,
                 int& child_rank) {
    LocalGroup& g = *group_;
    std::unique_lock lock(g.mutex);
    const Signature sig{"split", 0, DType::I32};
    Slot& slot = slot_for(seq);
    slot.color[rank_] = color;
    slot.key[rank_] = key;
    Slot& s = arrive(lock, seq, sig, nullptr);
    if (s.children.empty()) {  // the first rank out builds every new group
      std::map<int, std::vector<std::pair<int, int>>> members;  // color -> (key, rank)
      for (int r = 0; r < g.size; ++r) {
        if (s.color[r] >= 0) members[s.color[r]].push_back({s.key[r], r});
      }
      for (auto& [c, list] : members) {
        std::sort(list.begin(), list.end());
        s.children[c] = make_group(fmt::format("{}/split({})", g.name, c), int(list.size()),
                                   g.timeout_seconds, g.world_abort);
        s.children[c]->link_bytes_per_second = g.link_bytes_per_second;
      }
      s.children[-1] = nullptr;  // marks "built" even when every color is negative
    }
    if (color >= 0) {
      child = s.children[color];
      std::vector<std::pair<int, int>> list;
      for (int r = 0; r < g.size; ++r) {
        if (s.color[r] == color) list.push_back({s.key[r], r});
      }
      std::sort(list.begin(), list.end());
      child_rank = int(std::find(list.begin(), list.end(), std::pair{key, rank_}) - list.begin());
    }
    leave(seq, s);
  }

  Event p2p(bool is_send, const Tensor& data, int peer) {
    auto op = std::make_shared<P2POp>();
    op->is_send = is_send;
    op->data = data;
    op->self = rank_;
    op->peer = peer;
    op->seq = is_send ? sends_[peer]++ : recvs_[peer]++;
    if (in_group_) {
      group_ops_.push_back(op);
      return op->event;
    }
    group_start();
    group_ops_.push_back(op);
    return group_end();
  }

  static std::string describe(const P2POp& op) {
    return fmt::format("{} #{} {} rank {} ({})", op.is_send ? "send" : "recv", op.seq,
                       op.is_send ? "to" : "from", op.peer, op.data.describe());
  }

  // Posts every op of a group, matches what can be matched, waits for the rest.
  void run_p2p(const std::vector<std::shared_ptr<P2POp>>& ops) {
    LocalGroup& g = *group_;
    std::unique_lock lock(g.mutex);
    for (const auto& op : ops) {
      const auto link = op->is_send ? std::pair{op->self, op->peer} : std::pair{op->peer, op->self};
      auto& box = g.mailboxes[link];
      (op->is_send ? box.sends : box.recvs).push_back(op);
      while (!box.sends.empty() && !box.recvs.empty()) {
        auto s = box.sends.front(), r = box.recvs.front();
        box.sends.pop_front();
        box.recvs.pop_front();
        if (s->data.dtype() != r->data.dtype() || s->data.numel() != r->data.numel()) {
          const std::string error = fmt::format(
              "send/recv mismatch on communicator '{}' between rank {} and rank {} at sequence "
              "{}: rank {} sends {} but rank {} receives into {}",
              g.name, s->self, r->self, s->seq, s->self, s->data.describe(), r->self,
              r->data.describe());
          s->error = r->error = error;
        } else {
          copy_bytes(r->data, s->data);
        }
        s->done = r->done = true;
      }
    }
    g.cv.notify_all();
    WaitTimer timer;
    auto all_done = [&] {
      return std::all_of(ops.begin(), ops.end(), [](const auto& o) { return o->done; });
    };
    while (!all_done()) {
      // Abandoned (another rank failed) or timed out: withdraw what is still unmatched.
      const std::string abandoned = g.world_abort->get();
      if ((!abandoned.empty() || g.wait_slice(lock, timer)) && !all_done()) {
        for (const auto& op : ops) {
          if (!op->done) {
            op->error = abandoned.empty()
                            ? fmt::format(
                                  "rank {}: {} on communicator '{}' was not matched by a {} "
                                  "within {} s",
                                  rank_, describe(*op), g.name, op->is_send ? "receive" : "send",
                                  g.timeout_seconds)
                            : fmt::format("rank {}: {} on communicator '{}' abandoned: {}", rank_,
                                          describe(*op), g.name, abandoned);
            op->done = true;
            // Withdraw it so a late partner does not write into a buffer that is gone.
            auto& box = g.mailboxes[op->is_send ? std::pair{op->self, op->peer}
                                                : std::pair{op->peer, op->self}];
            auto& q = op->is_send ? box.sends : box.recvs;
            q.erase(std::remove(q.begin(), q.end(), op), q.end());
          }
        }
      }
    }
    for (const auto& op : ops) {
      if (!op->error.empty()) throw Error(op->error);  // the group fails with its first error
    }
    if (g.link_bytes_per_second > 0) {  // the simulated link: the group's larger direction
      lock.unlock();
      double sent = 0, received = 0;
      for (const auto& op : ops) (op->is_send ? sent : received) += double(op->data.nbytes());
      std::this_thread::sleep_for(
          std::chrono::duration<double>(std::max(sent, received) / g.link_bytes_per_second));
    }
  }

  std::shared_ptr<LocalGroup> group_;
  int rank_;
  std::int64_t next_seq_ = 0;                // collectives issued on this communicator
  std::vector<std::int64_t> sends_, recvs_;  // per peer
  bool in_group_ = false;
  std::vector<std::shared_ptr<P2POp>> group_ops_;
  std::vector<char> staging_;    // in-place reductions, device results (worker thread only)
  std::vector<char> send_copy_;  // host copy of a device send buffer (worker thread only)
  comm::Worker worker_;          // last member: its thread stops before the rest is destroyed
};

}  // namespace

LocalWorld::LocalWorld(int size, double timeout_seconds, double link_bytes_per_second)
    : world_(make_group("world", size, timeout_seconds, std::make_shared<detail::WorldAbort>())) {
  CAROUSEL_CHECK(size >= 1, "a local world needs at least one rank, got {}", size);
  CAROUSEL_CHECK(timeout_seconds > 0, "collective_timeout_seconds must be > 0, got {}",
                 timeout_seconds);
  CAROUSEL_CHECK(link_bytes_per_second >= 0, "a simulated link of {} bytes/s: use 0 (memory "
                 "speed) or a positive speed", link_bytes_per_second);
  world_->link_bytes_per_second = link_bytes_per_second;
}

int LocalWorld::size() const { return world_->size; }

void LocalWorld::abort(const std::string& reason) const {
  std::vector<std::shared_ptr<LocalGroup>> groups;
  {
    std::lock_guard lock(world_->world_abort->mutex);
    if (!world_->world_abort->reason.empty()) return;  // the first failure is the cause
    world_->world_abort->reason = reason;
    for (const auto& weak : world_->world_abort->groups) {
      if (auto group = weak.lock()) groups.push_back(group);
    }
  }
  for (const auto& group : groups) {  // wake every waiter so it sees the abort
    std::lock_guard lock(group->mutex);
    group->cv.notify_all();
  }
}

std::unique_ptr<Communicator> LocalWorld::communicator(int rank) const {
  CAROUSEL_CHECK(rank >= 0 && rank < world_->size, "rank {} is outside the world of {} ranks", rank,
                 world_->size);
  return std::make_unique<LocalCommunicator>(world_, rank);
}

}  // namespace carousel
