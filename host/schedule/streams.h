// streams.h — the GPU stream plan of a lowered program, and a recording model that proves it.
//
// On a GPU each rank computes on its own stream and each communicator runs on its own stream.
// plan_streams() decides, per action of a rank's lowered list, the stream it is enqueued on and
// the events between streams: which action records an event, which action makes its stream wait
// for which event, and where the host itself must block (only the optimizer's global norm).
// record_streams() executes the plans of all ranks on simulated in-order streams with the cost
// model's durations, honouring only the plan's waits (and NCCL's cross-rank p2p matching), and
// records every read and write of every buffer on device time; check_recording() reports each
// read that starts before the write it depends on ends, and each write that starts while the
// buffer's previous contents are still used. Rules and what is proven: docs/pipeline.md
// "Streams and events (the GPU plan)". Nothing here runs on a GPU yet.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "host/schedule/ir.h"
#include "host/schedule/simulate.h"

namespace carousel::schedule {

enum class Stream : std::uint8_t {
  compute,  // F, B, I, W; AG_WAIT and RELEASE are markers on it (a wait, an event)
  pipe,     // the pipeline ring communicator: SEND/RECV groups
  fsdp,     // the FSDP communicator: AG_ISSUE, REDUCE_SCATTER
  host,     // OPTIMIZER: the host reads the global norm
};
inline constexpr int kStreams = 4;  // how many Stream values there are
static_assert(int(Stream::host) + 1 == kStreams, "kStreams counts the Stream values");
std::string_view stream_name(Stream s);

// Why a stream waits: one reason per rule of the plan.
enum class WaitReason : std::uint8_t {
  activation_ready,  // SEND_F / SEND_B after the compute that produced what it sends
  received,          // a compute after the p2p group that received its input
  weights_gathered,  // AG_WAIT: compute after the slot's all-gather (event on the fsdp stream)
  slot_free,         // AG_ISSUE after the compute event at the slot's previous RELEASE (reuse)
  gradient_ready,    // REDUCE_SCATTER after the stage's last B / W
};
std::string_view reason_name(WaitReason r);

struct StreamEvent {
  int action;  // recorded on `stream` right after this action (a p2p group: its last action)
  Stream stream;
  bool operator==(const StreamEvent&) const = default;
};

struct StreamWait {
  int action;  // before this action is enqueued, its stream waits for...
  int event;   // ...this event (index into StreamPlan::events)
  WaitReason reason;
  bool operator==(const StreamWait&) const = default;
};

struct HostBlock {
  int action;               // the host blocks before running this action...
  std::vector<int> events;  // ...until these events have completed
  std::string why;
  bool operator==(const HostBlock&) const = default;
};

// One rank's plan. Index i of `stream`, `group` and `record` is action i of the rank's list.
struct StreamPlan {
  int rank = 0;
  std::vector<Stream> stream;  // the stream each action is enqueued on
  std::vector<int> group;      // p2p: index of the first action of its group (one NCCL group)
  std::vector<int> record;     // the event recorded after the action, -1 for none
  std::vector<StreamEvent> events;
  std::vector<StreamWait> waits;  // in enqueue order
  std::vector<HostBlock> host_blocks;
  bool operator==(const StreamPlan&) const = default;
};

// The plan of `rank` in a lowered program (lower() in passes.h). Pure: every rank that runs
// the same program derives the same plan. Throws carousel::Error for a list the plan cannot
// order (a RECV after its consumer, an AG_WAIT without AG_ISSUE, a slot refilled before its
// RELEASE, a compute reading weights no slot holds).
StreamPlan plan_streams(const Program& lowered, int rank);
std::vector<StreamPlan> plan_streams(const Program& lowered);  // every rank

// One line per action: "3F0 compute wait[e2 received] record e5", for reading and diffs.
std::string to_text(const Program& lowered, const StreamPlan& plan);

// ---- the recording model ------------------------------------------------------------------

enum class BufferKind : std::uint8_t {
  activation,   // output of F(stage, mb) as held on a rank (producer's, or a RECV_F's copy)
  input_grad,   // gradient of stage's input for mb (from B/I, or a RECV_B's copy)
  stash,        // what F(stage, mb) saves for its backward
  deferred,     // what I(stage, mb) keeps for W
  slot,         // a weight slot (index = slot); each AG_ISSUE is a new version
  weight_grad,  // the stage's full gradient buffer; each B / W accumulates a new version
  grad_shard,   // the stage's gradient shard written by REDUCE_SCATTER
};

struct Buffer {
  BufferKind kind;
  int stage = -1;  // slot: the slot index
  int microbatch = -1;
  auto operator<=>(const Buffer&) const = default;
};
std::string to_string(const Buffer& b);

struct Access {
  int rank;
  int action;  // index in the rank's list
  Buffer buffer;
  int version;  // which write's contents (0 = the first write of the step)
  bool write;
  double start = 0, end = 0;  // device time, filled by record_streams
};

// The reads and writes of a rank's actions, in list order, from the program's data flow alone
// (no streams): what a correct execution must respect.
std::vector<Access> data_accesses(const Program& lowered, int rank);

struct Recording {
  std::vector<std::vector<double>> start, end;  // [rank][action], device time
  std::vector<Access> accesses;                 // every rank's, with device times
  std::vector<double> exposed_all_gather;       // per rank: compute-stream idle at AG_WAITs
  double step_time = 0;
};

// Runs the plans: each stream of each rank executes its actions in order, an action starts when
// its stream is free and the events it waits for are recorded (a host action: when its host
// block's events are); a p2p group starts when posted and ends when every partner group has
// been posted too, plus costs.p2p. Durations: costs.duration(action) (compute, the fsdp
// stream's all_gather and reduce_scatter, 0 for markers and the host), plus
// extra[rank][action] when given (adversarial timings: a slow producer exposes any wait a plan
// lacks). Throws carousel::Error if the plans deadlock.
Recording record_streams(const Program& lowered, const std::vector<StreamPlan>& plans,
                         const Costs& costs, const std::vector<std::vector<double>>& extra = {});

// Every hazard in the recording: a read starting before the end of the write of its version, a
// write starting before every access of the previous version has ended. Empty = hazard-free.
std::vector<std::string> check_recording(const Program& lowered, const Recording& recording);

}  // namespace carousel::schedule
