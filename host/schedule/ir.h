// ir.h — the schedule intermediate representation: what every pipeline rank does in one step.
//
// A Program holds one ordered list of Actions per pipeline rank. Generators (generators.h, one
// per schedule of registry.h) emit compute actions only: F (forward), B (full backward) or I + W
// (zero-bubble split: input gradient, weight gradient) of a (stage, microbatch). Lowering (lower()
// in passes.h) adds communication and weight residency: SEND/RECV of activations and gradients,
// AG_ISSUE/AG_WAIT (all-gather) and RELEASE of weight slots, REDUCE_SCATTER of gradients,
// OPTIMIZER.
//
// "stage" is the virtual stage: layers [stage*L, (stage+1)*L) of the model, or with uneven
// stages the layers StageLayers (stage_layers.h) gives it; with S ranks and R repeats there are
// S*R of them. The program never needs the layer counts: only the cost model does (Costs).
// Layout::rank_of places them: loop placement (the default) puts stage v on rank v % S (MaxText's
// repeat r of stage s is virtual stage r*S + s); V placement (zbv) runs the stages down the ranks
// and back up, v on rank v for v < S and on 2S-1-v for S <= v < 2S, so the first and the last stage
// share rank 0. Every pass and the executor ask rank_of, never v % S.
//
// Text form (PyTorch pipelining style), one action per token:
//   0F1  2B0  3I1  3W1        stage, kind, microbatch
//   0F4& 3B0                  an overlapped F&B pair (DualPipe): the F marked & runs paired
//                             with the rank's next compute action, a backward of another
//                             microbatch (see Action::overlap)
//   1SEND_F0  2RECV_F0        activation of stage 1 / into stage 2, microbatch 0
//   2SEND_B0  1RECV_B0        gradient of stage 2's input / into stage 1, microbatch 0
//   4AG_ISSUE1  4AG_WAIT1     gather stage 4's weights into slot 1 / wait for it
//   2RELEASE0                 free slot 0, which held stage 2's weights
//   3REDUCE_SCATTER           reduce-scatter stage 3's gradients
//   3A2A_F1  3A2A_B1          the expert all-to-alls of the F (B or I) of stage 3, microbatch 1
//   4OUTSIDE1                 the layers outside the pipeline, forward and backward, of
//                             microbatch 1 (stage 4 = S x R: one past the last virtual stage)
//   OPTIMIZER
//
// Layers outside the pipeline (MaxText's pipeline_parallel_layers; Layout::outside): the virtual
// stages run the first P decoder layers, and the layers after them, the final norm and the head
// run as one more stage, stage V = S x R, whose microbatch m runs on rank m % S: the stage axis
// splits the microbatches like data parallelism. Its OUTSIDE action is the forward, the loss and
// the backward of those layers at once, so it sits between the last stage's F and B of the
// microbatch: the last stage sends its output to the OUTSIDE's rank (SEND_F of stage V - 1, RECV_F
// into stage V) and receives the input gradient back (SEND_B of stage V, RECV_B into V - 1).
// Only schedules that run every forward before any backward place it (registry.h
// forwards_first): each rank runs its OUTSIDE actions after its last F, in the bubble before its
// first backward, in the order the last stage's backwards need them (passes.h place_outside).
//
// Expert exchanges (LoweringOptions::exchanges): an MoE layer with experts split over ranks
// (expert parallelism) sends its routed rows to their experts' ranks and back, twice per MoE
// layer in a forward, twice (four times when remat recomputes the forward) in a backward. Lowering
// puts an A2A_F / A2A_B right before each compute action that exchanges: the rank's expert
// communicator runs that action's all-to-alls while it computes. Alone, the action waits for each
// at once; in an overlapped F&B pair each half's exchanges run while the other half computes
// (DualPipe), which simulate() models and the executor does (host/runtime/overlapped_pair.h).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace carousel::schedule {

// clang-format off
enum class Kind : std::uint8_t {
  F, B, I, W,                          // compute
  OUTSIDE,                             // compute: the layers after the pipeline (Layout::outside)
  SEND_F, RECV_F, SEND_B, RECV_B,      // point-to-point between pipeline ranks
  AG_ISSUE, AG_WAIT, RELEASE,          // weight residency (FSDP all-gather into slots)
  REDUCE_SCATTER,
  A2A_F, A2A_B,                        // expert exchanges of the next F / of the next B or I
  OPTIMIZER,
};
// clang-format on

struct Action {
  Kind kind = Kind::F;
  int stage = -1;  // virtual stage; -1 for OPTIMIZER
  int index = -1;  // microbatch (compute, p2p) or slot (AG_*, RELEASE); -1 otherwise
  int peer = -1;   // p2p: the other rank (set by lowering and parse_program)
  // F only: this forward and the rank's next compute action (a B or I of another microbatch,
  // so neither reads what the other writes) form one overlapped F&B pair, DualPipe's "F&B
  // chunk". The pair starts when both inputs are there (lower() and simulate() treat it as one
  // unit); the executor runs the two back to back, or, when they exchange rows with expert ranks,
  // taking turns at those exchanges (takes_turns below).
  // A scheduling hint, not part of the action's identity (operator== ignores it).
  bool overlap = false;

  bool is_compute() const { return kind <= Kind::OUTSIDE; }
  bool is_p2p() const { return kind >= Kind::SEND_F && kind <= Kind::RECV_B; }
  bool is_exchange() const { return kind == Kind::A2A_F || kind == Kind::A2A_B; }
  bool operator==(const Action& o) const {
    return kind == o.kind && stage == o.stage && index == o.index;
  }
};

std::string to_string(const Action& a);      // "0F4", "0F4&" for the F of an overlapped pair
Action parse_action(std::string_view text);  // throws carousel::Error on bad text
std::string_view kind_name(Kind k);

// How virtual stages map to ranks (see the header comment).
enum class Placement : std::uint8_t {
  Loop,  // v on rank v % S
  V,     // v on rank v mod 2S if that is < S, else 2S - 1 - (v mod 2S): down and back up
};

// Where stages live and how many there are.
struct Layout {
  int ranks = 1;         // S, pipeline ranks
  int repeats = 1;       // R, stages per rank (circular repeats / interleaved chunks)
  int microbatches = 1;  // M
  Placement placement = Placement::Loop;  // set by the generator (zbv: V)
  bool outside = false;  // layers after the pipeline: stage stages() of OUTSIDE actions (above)
  int stages() const { return ranks * repeats; }
  // The rank running `stage`'s work on `microbatch`: rank_of(stage), or for the outside stage
  // (stage == stages()) the microbatch's rank, m % S.
  int rank_of(int stage, int microbatch) const {
    return stage == stages() ? microbatch % ranks : rank_of(stage);
  }
  int rank_of(int stage) const {
    if (placement == Placement::Loop) return stage % ranks;
    const int k = stage % (2 * ranks);
    return k < ranks ? k : 2 * ranks - 1 - k;
  }
};

// The partner of an overlapped F at list[i]: the index of the next compute action after i
// (lowering may put p2p and weight actions between the two), or list.size() if there is none.
std::size_t overlap_partner(const std::vector<Action>& list, std::size_t i);

// The A2A naming the expert exchanges of a compute action: A2A_F of an F (and of an OUTSIDE,
// whose forward runs first), A2A_B of a B or I.
Action exchange_of(const Action& compute);

// Whether the compute action at list[i] exchanges rows with its expert ranks: an A2A right
// before it (place_exchanges in passes.h puts them there).
bool exchanges_at(const std::vector<Action>& list, std::size_t i);

// Whether the overlapped F at list[i] and its partner take turns on the rank's compute, each
// half's expert exchanges in flight while the other computes (simulate(), and the executor:
// host/runtime/overlapped_pair.h): when either half exchanges (an A2A right before it) and only
// p2p and A2A actions lie between them (a weight gather, wait or release between the halves
// must happen between them, so such a pair runs its halves one after the other). The sends
// and receives between the halves are posted after both.
bool takes_turns(const std::vector<Action>& list, std::size_t i);

struct Program {
  Layout layout;
  std::vector<std::vector<Action>> ranks;  // ranks[r] = rank r's actions in order
};

// One line per rank: "rank 0: 0F0 0F1 ...". parse_program reads the same form back.
std::string to_text(const Program& program);
Program parse_program(const Layout& layout, std::string_view text);

}  // namespace carousel::schedule
