// ir.cpp — text form of actions and programs.
#include "host/schedule/ir.h"

#include <fmt/format.h>

#include <cctype>
#include <sstream>

#include "compute/error.h"

namespace carousel::schedule {

namespace {
struct KindInfo {
  Kind kind;
  std::string_view name;
  bool has_stage, has_index;
};
constexpr KindInfo kKinds[] = {
    {Kind::F, "F", true, true},
    {Kind::B, "B", true, true},
    {Kind::I, "I", true, true},
    {Kind::W, "W", true, true},
    {Kind::OUTSIDE, "OUTSIDE", true, true},
    {Kind::SEND_F, "SEND_F", true, true},
    {Kind::RECV_F, "RECV_F", true, true},
    {Kind::SEND_B, "SEND_B", true, true},
    {Kind::RECV_B, "RECV_B", true, true},
    {Kind::AG_ISSUE, "AG_ISSUE", true, true},
    {Kind::AG_WAIT, "AG_WAIT", true, true},
    {Kind::RELEASE, "RELEASE", true, true},
    {Kind::REDUCE_SCATTER, "REDUCE_SCATTER", true, false},
    {Kind::A2A_F, "A2A_F", true, true},
    {Kind::A2A_B, "A2A_B", true, true},
    {Kind::OPTIMIZER, "OPTIMIZER", false, false},
};
const KindInfo& info(Kind k) { return kKinds[static_cast<int>(k)]; }
}  // namespace

std::string_view kind_name(Kind k) { return info(k).name; }

std::string to_string(const Action& a) {
  const KindInfo& i = info(a.kind);
  std::string s;
  if (i.has_stage) s += std::to_string(a.stage);
  s += i.name;
  if (i.has_index) s += std::to_string(a.index);
  if (a.overlap) s += '&';
  return s;
}

std::size_t overlap_partner(const std::vector<Action>& list, std::size_t i) {
  std::size_t j = i + 1;
  while (j < list.size() && !list[j].is_compute()) ++j;
  return j;
}

Action exchange_of(const Action& compute) {
  const bool forward = compute.kind == Kind::F || compute.kind == Kind::OUTSIDE;
  return {forward ? Kind::A2A_F : Kind::A2A_B, compute.stage, compute.index};
}

bool exchanges_at(const std::vector<Action>& list, std::size_t i) {
  return i > 0 && list[i - 1].is_exchange();
}

bool takes_turns(const std::vector<Action>& list, std::size_t i) {
  if (!list[i].overlap) return false;
  const std::size_t j = overlap_partner(list, i);
  if (j == list.size()) return false;
  if (!exchanges_at(list, i) && !exchanges_at(list, j)) return false;
  for (std::size_t k = i + 1; k < j; ++k) {
    if (!list[k].is_p2p() && !list[k].is_exchange()) return false;
  }
  return true;
}

Action parse_action(std::string_view text) {
  std::size_t p = 0;
  auto number = [&](std::size_t& pos) {
    const std::size_t start = pos;
    while (pos < text.size() && std::isdigit(static_cast<unsigned char>(text[pos]))) ++pos;
    return start == pos ? -1 : std::stoi(std::string(text.substr(start, pos - start)));
  };
  Action a;
  a.stage = number(p);
  // The longest kind name that matches here (SEND_F before F would be wrong the other way).
  const KindInfo* best = nullptr;
  for (const auto& k : kKinds) {
    if (text.substr(p, k.name.size()) == k.name && (!best || k.name.size() > best->name.size())) {
      best = &k;
    }
  }
  CAROUSEL_CHECK(best,
                 "schedule action '{}' is not valid: expected e.g. 0F1, 2B0, 1SEND_F0, "
                 "4AG_ISSUE1, 3REDUCE_SCATTER, 3A2A_F1, 4OUTSIDE1 or OPTIMIZER",
                 text);
  a.kind = best->kind;
  p += best->name.size();
  a.index = number(p);
  if (p < text.size() && text[p] == '&') {
    CAROUSEL_CHECK(a.kind == Kind::F && p + 1 == text.size(),
                   "schedule action '{}' is not valid: only a forward (e.g. 0F4&) may carry the "
                   "'&' of an overlapped F&B pair, as its last character",
                   text);
    a.overlap = true;
    ++p;
  }
  CAROUSEL_CHECK(p == text.size() && (a.stage >= 0) == best->has_stage &&
                     (a.index >= 0) == best->has_index,
                 "schedule action '{}' is not valid: {} takes {}{}", text, best->name,
                 best->has_stage ? "a stage before it" : "no stage",
                 best->has_index ? " and a number after it" : " and no number after it");
  return a;
}

std::string to_text(const Program& program) {
  std::string out;
  for (std::size_t r = 0; r < program.ranks.size(); ++r) {
    out += fmt::format("rank {}:", r);
    for (const auto& a : program.ranks[r]) {
      out += ' ';
      out += to_string(a);
    }
    out += "\n";
  }
  return out;
}

Program parse_program(const Layout& layout, std::string_view text) {
  Program p{layout, std::vector<std::vector<Action>>(layout.ranks)};
  std::istringstream in{std::string(text)};
  std::string line;
  while (std::getline(in, line)) {
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    int rank = -1;
    char colon = 0;
    std::istringstream ls(line);
    std::string word;
    ls >> word >> rank >> colon;
    CAROUSEL_CHECK(word == "rank" && colon == ':' && rank >= 0 && rank < layout.ranks,
                   "schedule line '{}' must look like 'rank R: 0F0 ...' with R in [0, {})", line,
                   layout.ranks);
    while (ls >> word) {
      Action a = parse_action(word);
      if (a.is_p2p()) {  // the peer follows from the layout
        const bool to_next = a.kind == Kind::SEND_F || a.kind == Kind::RECV_B;
        const int other = to_next ? a.stage + 1 : a.stage - 1;
        const int stages = layout.stages() + (layout.outside ? 1 : 0);
        CAROUSEL_CHECK(other >= 0 && other < stages,
                       "schedule action '{}' on rank {} has no peer stage {}", word, rank, other);
        a.peer = layout.rank_of(other, a.index);
      }
      p.ranks[rank].push_back(a);
    }
  }
  return p;
}

}  // namespace carousel::schedule
