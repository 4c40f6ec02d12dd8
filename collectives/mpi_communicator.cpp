// mpi_communicator.cpp — MpiRuntime and the MPI communicator: signature-checked collectives,
// rank-order reductions built from all-to-all, grouped Isend/Irecv, split.
#include "collectives/mpi_communicator.h"

#include <fmt/format.h>
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstring>
#include <exception>
#include <thread>
#include <vector>

#include "collectives/common.h"
#include "collectives/wait_timer.h"
#include "compute/dispatch.h"
#include "compute/error.h"

namespace carousel {

std::string detail::mpi_error_string(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(code, text, &length);
  return std::string(text, length);
}

namespace {

MPI_Datatype mpi_type(DType t) {  // bf16 is moved as bits, never reduced by MPI
  // Only moves bytes (reductions are local): 16-bit floats travel as uint16.
  return per_dtype(t, MPI_FLOAT, MPI_DOUBLE, MPI_UINT16_T, MPI_INT32_T, MPI_UINT16_T, MPI_INT8_T,
                   MPI_UINT8_T, MPI_INT64_T);
}

// A collective's signature as fixed-size bytes, so ranks can all-gather and compare them.
struct WireSignature {
  char op[24] = {};
  char reduce[8] = {};
  std::int64_t count = 0;
  std::int32_t dtype = 0, root = -1;

  explicit WireSignature(const comm::Signature& s)
      : count(s.count), dtype(int(s.dtype)), root(s.root) {
    std::strncpy(op, s.op.c_str(), sizeof(op) - 1);
    std::strncpy(reduce, s.reduce.c_str(), sizeof(reduce) - 1);
  }
  WireSignature() = default;
  comm::Signature decode() const { return {op, count, DType(dtype), root, reduce}; }
};

class MpiCommunicator final : public Communicator {
 public:
  MpiCommunicator(MPI_Comm comm, std::string name, double timeout)
      : comm_(comm),
        name_(std::move(name)),
        timeout_(timeout),
        worker_(std::make_unique<comm::Worker>()) {
    MPI_CHECK(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN));
    MPI_CHECK(MPI_Comm_rank(comm_, &rank_));
    MPI_CHECK(MPI_Comm_size(comm_, &size_));
  }
  ~MpiCommunicator() override {
    worker_.reset();  // runs what is queued, then joins
    MPI_Comm_free(&comm_);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string name() const override { return name_; }

  Event do_all_gather(const Tensor& send, const Tensor& recv) override {
    return collective({"all_gather", send.numel(), send.dtype()}, {send, recv}, [=, this] {
      const int n = int_count(send.numel());
      const char* own = static_cast<const char*>(recv.raw()) + rank_ * send.nbytes();
      const void* input = send.raw() == own ? MPI_IN_PLACE : send.raw();
      std::vector<char> copy;  // a send that overlaps recv elsewhere than its own slice
      if (input != MPI_IN_PLACE && overlap(send, recv)) {
        copy.assign(static_cast<const char*>(send.raw()),
                    static_cast<const char*>(send.raw()) + send.nbytes());
        input = copy.data();
      }
      wait(MPI_ISSUE(MPI_Iallgather, input, n, mpi_type(send.dtype()), recv.raw(), n,
                     mpi_type(send.dtype()), comm_));
    });
  }

  Event do_reduce_scatter(const Tensor& send, const Tensor& recv, ReduceOp op) override {
    return collective({"reduce_scatter", recv.numel(), send.dtype(), -1, reduce_op_name(op)},
                      {send, recv}, [=, this] { run_reduce_scatter(send, recv, op); });
  }

  Event do_all_reduce(const Tensor& send, const Tensor& recv, ReduceOp op) override {
    return collective({"all_reduce", send.numel(), send.dtype(), -1, reduce_op_name(op)},
                      {send, recv}, [=, this] { run_all_reduce(send, recv, op); });
  }

  Event do_broadcast(const Tensor& send, const Tensor& recv, int root) override {
    return collective({"broadcast", send.numel(), send.dtype(), root}, {send, recv}, [=, this] {
      if (rank_ == root && send.raw() != recv.raw())
        std::memcpy(recv.raw(), send.raw(), send.nbytes());
      wait(MPI_ISSUE(MPI_Ibcast, recv.raw(), int_count(recv.numel()), mpi_type(recv.dtype()), root,
                     comm_));
    });
  }

  Event barrier() override {
    return collective({"barrier", 0, DType::F32}, {},
                      [this] { wait(MPI_ISSUE(MPI_Ibarrier, comm_)); });
  }

  void group_start() override {
    CAROUSEL_ASSERT(!in_group_, "group_start on communicator '{}' rank {}: already in a group",
                    name_, rank_);
    in_group_ = true;
  }
  Event group_end() override {
    CAROUSEL_ASSERT(in_group_, "group_end on communicator '{}' rank {} without group_start", name_,
                    rank_);
    in_group_ = false;
    std::vector<P2P> ops = std::move(group_);
    group_.clear();
    Event done;
    std::vector<Event> events = {Event()};  // the group's, then each operation's
    for (const P2P& op : ops) events.push_back(op.event);
    worker_->enqueue([this, ops] { run_group(ops); }, events);
    return events.front();
  }
  Event do_send(const Tensor& data, int peer) override { return p2p(true, data, peer); }
  Event do_recv(const Tensor& data, int peer) override { return p2p(false, data, peer); }

  std::unique_ptr<Communicator> split(int color, int key) override {
    MPI_Comm child = MPI_COMM_NULL;
    Event done;
    worker_->enqueue(  // in issue order with this communicator's other operations
        [&] {
          check_usable();
          MPI_CHECK(MPI_Comm_split(comm_, color < 0 ? MPI_UNDEFINED : color, key, &child));
        },
        {done});
    done.wait();
    if (child == MPI_COMM_NULL) return nullptr;
    return std::make_unique<MpiCommunicator>(child, fmt::format("{}/split({})", name_, color),
                                             timeout_);
  }

 private:
  struct P2P {
    bool is_send;
    Tensor data;
    int peer;
    std::int64_t seq;  // k-th send (or receive) between this rank and the peer
    Event event;
  };

  int int_count(std::int64_t n) const {
    CAROUSEL_CHECK(n <= INT_MAX,
                   "communicator '{}': {} elements is more than MPI's int count "
                   "allows ({}); split the tensor",
                   name_, n, INT_MAX);
    return int(n);
  }

  static bool overlap(const Tensor& a, const Tensor& b) {
    const char* x = static_cast<const char*>(a.raw());
    const char* y = static_cast<const char*>(b.raw());
    return x < y + b.nbytes() && y < x + a.nbytes();
  }

  static void check_host(const Communicator& c, const Tensor& t) {
    CAROUSEL_CHECK(!t.defined() || t.device().kind() == DeviceKind::CPU,
                   "communicator '{}': the MPI communicator moves CPU memory, not {} (GPU "
                   "tensors go through the NCCL communicator)",
                   c.name(), t.describe());
  }

  // Polls until the requests complete (MPI makes progress only inside MPI_Test*: shared-memory
  // copy-in/copy-out moves a fragment per poll, so sleeping between polls makes large messages
  // 5x slower). Polls with yields for the first 20 ms, then sleeps up to 200 us between polls so
  // a rank that waits long leaves its core to ranks that compute. Past the timeout the
  // communicator is broken: this and later operations fail.
  void wait(MPI_Request request) { wait_all(&request, 1, nullptr); }
  // A pause of the whole job (every process stopped and continued) is not waiting: wait_timer.h.
  void wait_all(MPI_Request* requests, int n, MPI_Status* statuses) {
    WaitTimer timer;
    for (int sleeps = 0;;) {
      int done = 0;
      MPI_CHECK(MPI_Testall(n, requests, &done, statuses ? statuses : MPI_STATUSES_IGNORE));
      if (done) return;
      const double waited = timer.waited();
      if (waited > timeout_) {
        broken_ = fmt::format(
            "rank {}: {} on communicator '{}' timed out after {} s (a rank "
            "has not issued it, or issued other operations first)",
            rank_, current_, name_, timeout_);
        fail("{}", broken_);
      }
      if (waited < 0.02) {
        std::this_thread::yield();
      } else {
        sleeps = std::min(sleeps + 1, 200);
        std::this_thread::sleep_for(std::chrono::microseconds(sleeps));
      }
    }
  }

  // First thing every task does: a timeout leaves MPI requests pending, so nothing may run after.
  void check_usable() const {
    CAROUSEL_CHECK(broken_.empty(), "communicator '{}' is unusable after an earlier error: {}",
                   name_, broken_);
  }

  // Enqueues a collective: every rank first all-gathers the signatures and compares them.
  template <class Body>
  Event collective(comm::Signature sig, std::initializer_list<Tensor> tensors, Body body) {
    CAROUSEL_ASSERT(!in_group_,
                    "{} on communicator '{}' inside a send/recv group: only send and "
                    "recv may be grouped",
                    sig.op, name_);
    for (const Tensor& t : tensors) check_host(*this, t);
    const std::int64_t seq = next_seq_++;
    Event done;
    worker_->enqueue(
        [this, sig, seq, body] {
          check_usable();
          current_ = fmt::format("{} #{}", sig.str(), seq);
          check_signatures(sig, seq);
          body();
        },
        {done});
    return done;
  }

  void check_signatures(const comm::Signature& sig, std::int64_t seq) {
    std::vector<WireSignature> all(size_);
    all[rank_] = WireSignature(sig);
    wait(MPI_ISSUE(MPI_Iallgather, MPI_IN_PLACE, int(sizeof(WireSignature)), MPI_BYTE, all.data(),
                   int(sizeof(WireSignature)), MPI_BYTE, comm_));
    for (int r = 0; r < size_; ++r) {
      const comm::Signature theirs = all[r].decode();
      CAROUSEL_CHECK(theirs == sig,
                     "collective mismatch on communicator '{}' at sequence {}: "
                     "rank {} called {} but rank {} called {}",
                     name_, seq, r, theirs.str(), rank_, sig.str());
    }
  }

  // All-to-all gives every rank the size x count blocks it reduces; it adds them in rank order.
  void run_reduce_scatter(const Tensor& send, const Tensor& recv, ReduceOp op) {
    std::vector<char> blocks(send.nbytes());
    exchange_blocks(send.raw(), blocks.data(), recv.numel(), send.dtype());
    reduce_blocks(blocks.data(), recv.raw(), recv.numel(), send.dtype(), op);
  }

  // Reduce-scatter of the padded tensor, then all-gather of the reduced blocks: the bandwidth
  // of a ring all-reduce and the rank-order sums of the local communicator.
  void run_all_reduce(const Tensor& send, const Tensor& recv, ReduceOp op) {
    const std::size_t elt = dtype_size(send.dtype());
    const std::int64_t block = (send.numel() + size_ - 1) / size_;
    std::vector<char> padded(block * size_ * elt, 0), blocks(padded.size());
    std::memcpy(padded.data(), send.raw(), send.nbytes());
    exchange_blocks(padded.data(), blocks.data(), block, send.dtype());
    char* mine = padded.data() + rank_ * block * elt;  // padded is free again: reuse it
    reduce_blocks(blocks.data(), mine, block, send.dtype(), op);
    const int n = int_count(block);
    wait(MPI_ISSUE(MPI_Iallgather, MPI_IN_PLACE, n, mpi_type(send.dtype()), padded.data(), n,
                   mpi_type(send.dtype()), comm_));
    std::memcpy(recv.raw(), padded.data(), recv.nbytes());
  }

  // blocks [size][count] on this rank = block `rank` of every rank's `send` [size][count].
  void exchange_blocks(const void* send, void* blocks, std::int64_t count, DType dtype) {
    const int n = int_count(count);
    wait(MPI_ISSUE(MPI_Ialltoall, send, n, mpi_type(dtype), blocks, n, mpi_type(dtype), comm_));
  }
  // out [count] = blocks[0] op blocks[1] op ... in rank order (/ size for avg).
  void reduce_blocks(const char* blocks, void* out, std::int64_t count, DType dtype,
                     ReduceOp op) const {
    const std::size_t bytes = count * dtype_size(dtype);
    std::vector<const void*> inputs(size_);
    for (int r = 0; r < size_; ++r) inputs[r] = blocks + r * bytes;
    comm::reduce_in_rank_order(dtype, op, inputs, out, count);
  }

  Event p2p(bool is_send, const Tensor& data, int peer) {
    check_host(*this, data);
    if (sends_.empty()) sends_.assign(size_, 0), recvs_.assign(size_, 0);
    P2P op{is_send, data, peer, is_send ? sends_[peer]++ : recvs_[peer]++, Event()};
    if (in_group_) {
      group_.push_back(op);
      return op.event;
    }
    group_start();
    group_.push_back(op);
    return group_end();
  }

  // Posts every send and receive of a group (tag 0: MPI matches them per pair in issue order,
  // as NCCL does), waits for all, and checks each receive got the count it expected.
  void run_group(const std::vector<P2P>& ops) {
    check_usable();
    current_ = fmt::format("send/recv group of {}", ops.size());
    std::vector<MPI_Request> requests;
    for (const P2P& op : ops) {
      const int n = int_count(op.data.numel());
      requests.push_back(op.is_send ? MPI_ISSUE(MPI_Isend, op.data.raw(), n,
                                                mpi_type(op.data.dtype()), op.peer, 0, comm_)
                                    : MPI_ISSUE(MPI_Irecv, op.data.raw(), n,
                                                mpi_type(op.data.dtype()), op.peer, 0, comm_));
    }
    std::vector<MPI_Status> statuses(ops.size());
    wait_all(requests.data(), int(requests.size()), statuses.data());
    for (std::size_t i = 0; i < ops.size(); ++i) {
      if (ops[i].is_send) continue;
      int got = 0;
      MPI_CHECK(MPI_Get_count(&statuses[i], mpi_type(ops[i].data.dtype()), &got));
      CAROUSEL_CHECK(got == ops[i].data.numel(),
                     "send/recv mismatch on communicator '{}': "
                     "rank {} receives #{} into {} but rank {} sent {} elements",
                     name_, rank_, ops[i].seq, ops[i].data.describe(), ops[i].peer, got);
    }
  }

  MPI_Comm comm_;
  std::string name_;
  double timeout_;
  int rank_ = 0, size_ = 1;
  std::int64_t next_seq_ = 0;
  std::vector<std::int64_t> sends_, recvs_;  // per peer
  bool in_group_ = false;
  std::vector<P2P> group_;
  std::string current_;  // the operation the worker runs (for timeout messages)
  std::string broken_;   // set by a timeout
  std::unique_ptr<comm::Worker> worker_;
};

}  // namespace

MpiRuntime::MpiRuntime() {
  int initialized = 0;
  MPI_CHECK(MPI_Initialized(&initialized));
  CAROUSEL_CHECK(!initialized,
                 "MPI is already initialised in this process; create one "
                 "MpiRuntime");
  int provided = 0;
  MPI_CHECK(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided));
  if (provided < MPI_THREAD_MULTIPLE) {
    MPI_Finalize();
    fail(
        "this MPI library provides thread level {} but carousel's MPI communicator needs "
        "MPI_THREAD_MULTIPLE ({}); use Open MPI (Debian's libopenmpi-dev) or run the ranks as "
        "threads (no mpirun)",
        provided, int(MPI_THREAD_MULTIPLE));
  }
}

MpiRuntime::~MpiRuntime() { MPI_Finalize(); }

int MpiRuntime::rank() const {
  int r = 0;
  MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &r));
  return r;
}

int MpiRuntime::size() const {
  int s = 0;
  MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &s));
  return s;
}

std::unique_ptr<Communicator> MpiRuntime::world(double timeout_seconds) const {
  CAROUSEL_CHECK(timeout_seconds > 0, "collective_timeout_seconds must be > 0, got {}",
                 timeout_seconds);
  MPI_Comm comm = MPI_COMM_NULL;
  MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &comm));
  return std::make_unique<MpiCommunicator>(comm, "world", timeout_seconds);
}

void MpiRuntime::abort(int code) {
  MPI_Abort(MPI_COMM_WORLD, code);
  std::exit(code);  // not reached: MPI_Abort ends the process
}

}  // namespace carousel
