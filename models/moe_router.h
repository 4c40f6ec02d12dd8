// moe_router.h — a mixture-of-experts router: which experts each token goes to, with what
// weight, and the load-balancing terms; forward and backward in double on the host.
//
// Per token t with router logits z[t, 0..X) (X experts, k chosen):
//   scores   s = softmax(z)                       (Mixtral, Qwen-MoE, Switch)
//            s = sigmoid(z)                       (DeepSeek-V3)
//   choice   the k experts with the largest s + b (b: the auxiliary-loss-free bias, zero unless
//            balancing uses it; ties go to the lower expert index), in descending order
//   weights  w_j = c * s[e_j], or with normalize_top_k c * s[e_j] / sum_l s[e_l]
//            (c = routed_scaling_factor; DeepSeek-V3 normalizes, Mixtral's softmax over the
//            top-k logits is the same as normalizing)
// Load-balancing loss (Switch / DeepSeek-V3's balance loss), over each group of G tokens (a
// sequence: DeepSeek-V3's sequence-wise loss; G = N: one group, Switch's batch-wise loss):
// L_g = alpha * sum_i f_i * P_i with f_i = X * (tokens of g choosing i) / (k * G) (not
// differentiated) and P_i = mean over g's tokens of s'[t, i], s' = s normalized over all experts
// (= s for softmax); uniform routing gives L_g = alpha. L = sum over the groups of L_g. Per
// sequence, the loss does not depend on how a batch is split into microbatches or ranks.
// Auxiliary-loss-free balancing (DeepSeek-V3): after each step b_i += rate * sign(mean load -
// load_i), so overloaded experts are chosen less; it moves the choice only, never the weights.
//
// The router runs on the host: the counts per expert size the expert GEMMs (dropless dispatch)
// and the all-to-all of expert parallelism, as in Megatron, so they are needed there anyway;
// N x X scores are small next to the activations.
#pragma once

#include <cstdint>
#include <vector>

namespace carousel {

enum class RouterScore { Softmax, Sigmoid };

struct RouterConfig {
  int experts = 0;  // X
  int top_k = 1;    // k
  RouterScore score = RouterScore::Softmax;
  bool normalize_top_k = false;
  double routed_scaling_factor = 1.0;  // c
  double aux_loss_weight = 0.0;        // alpha (0: no load-balancing loss)
};

// What the router chose for N tokens; slot m = t * k + j is token t's j-th choice.
struct Routing {
  std::int64_t tokens = 0;               // N
  std::int64_t group_tokens = 0;         // G: this routing's tokens per balancing group
  std::int64_t group_total = 0;          // each group's tokens over every rank holding some
  std::vector<int> expert;               // [N*k] e_j, descending by s + b
  std::vector<double> weight;            // [N*k] w_j
  std::vector<double> scores;            // [N*X] s
  std::vector<std::int64_t> load;        // [X] tokens choosing each expert
  std::vector<std::int64_t> group_load;  // [N/G * X] tokens of each group choosing each expert
  std::vector<double> group_scores;      // [N/G * X] sum over each group's tokens of s'
  double aux_loss = 0.0;                 // L (0 without aux_loss_weight)
};

// `logits` [N*X] row-major; `bias` [X] or empty (no auxiliary-loss-free balancing);
// `group_tokens` G divides N (0: one group of all N tokens).
Routing route(const RouterConfig& cfg, const std::vector<double>& logits,
              const std::vector<double>& bias = {}, std::int64_t group_tokens = 0);

// L from the routing's group_load, group_scores and group_total: route() ends with it, and
// context parallelism calls it again once each sequence's counts and sums are pooled over the
// ranks holding its tokens (group_total then the whole sequence's; the backward's balancing
// term follows the pooled values too).
void score_balance(const RouterConfig& cfg, Routing& routing);

// d(logits) [N*X] of (sum_m dweight[m] * w_m + daux * L): the gradient of the combine weights
// (dweight [N*k], from the expert outputs) and of the balancing loss (daux: its weight in the
// objective, 1 when L is added to the loss as it is).
std::vector<double> route_backward(const RouterConfig& cfg, const Routing& routing,
                                   const std::vector<double>& dweight, double daux);

// Auxiliary-loss-free balancing: bias[i] += rate * sign(mean load - load[i]).
void update_router_bias(std::vector<double>& bias, const std::vector<std::int64_t>& load,
                        double rate);

}  // namespace carousel
