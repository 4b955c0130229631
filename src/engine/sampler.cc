// Sampler: vLLM's (V1) order — allowed_token_ids, bad_words, logit_bias, min_tokens, penalties,
// temperature, min-p, top-k/p, a seeded draw.
#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <numeric>

#include "ops/basic_ops.h"

namespace loom {

Status SamplingParams::Validate(int vocab_size) const {
  if (max_tokens < 1) {
    return InvalidArgument("max_tokens must be at least 1, got " + std::to_string(max_tokens));
  }
  if (std::isnan(temperature) || temperature > 100) {  // ≤ 0 (-inf too) is greedy (SPEC-api)
    return InvalidArgument("temperature must be a number at most 100 (≤ 0 is greedy), got " +
                           std::to_string(temperature));
  }
  if (top_k < -1) return InvalidArgument("top_k must be -1, 0 or positive");
  if (!(top_p > 0 && top_p <= 1)) {
    return InvalidArgument("top_p must be in (0, 1], got " + std::to_string(top_p));
  }
  if (!(min_p >= 0 && min_p <= 1)) {
    return InvalidArgument("min_p must be in [0, 1], got " + std::to_string(min_p));
  }
  if (!(repetition_penalty > 0 && repetition_penalty <= 10)) {
    return InvalidArgument("repetition_penalty must be in (0, 10], got " +
                           std::to_string(repetition_penalty));
  }
  if (!(presence_penalty >= -2 && presence_penalty <= 2)) {
    return InvalidArgument("presence_penalty must be in [-2, 2], got " +
                           std::to_string(presence_penalty));
  }
  if (!(frequency_penalty >= -2 && frequency_penalty <= 2)) {
    return InvalidArgument("frequency_penalty must be in [-2, 2], got " +
                           std::to_string(frequency_penalty));
  }
  if (logprobs < 0 || logprobs > 20) {
    return InvalidArgument("logprobs must be in [0, 20], got " + std::to_string(logprobs));
  }
  if (logprobs > vocab_size) return InvalidArgument("logprobs exceeds the vocabulary size");
  if (min_tokens < 0 || min_tokens > max_tokens) {
    return InvalidArgument("min_tokens must be in [0, max_tokens = " + std::to_string(max_tokens) +
                           "], got " + std::to_string(min_tokens));
  }
  if (allowed_token_ids != nullptr) {
    if (allowed_token_ids->empty()) return InvalidArgument("allowed_token_ids must not be empty");
    for (int32_t t : *allowed_token_ids) {
      if (t < 0 || t >= vocab_size) {
        return InvalidArgument("allowed_token_ids: token id " + std::to_string(t) +
                               " is outside the vocabulary [0, " + std::to_string(vocab_size) +
                               ")");
      }
    }
  }
  for (const auto& word : bad_words_token_ids) {
    if (word.empty()) return InvalidArgument("bad_words: a word encodes to no tokens");
    for (int32_t t : word) {
      if (t < 0 || t >= vocab_size) {
        return InvalidArgument("bad_words: token id " + std::to_string(t) +
                               " is outside the vocabulary [0, " + std::to_string(vocab_size) +
                               ")");
      }
    }
  }
  for (const auto& [token, bias] : logit_bias) {
    if (token < 0 || token >= vocab_size) {
      return InvalidArgument("logit_bias: token id " + std::to_string(token) +
                             " is outside the vocabulary [0, " + std::to_string(vocab_size) + ")");
    }
    if (!(bias >= -100 && bias <= 100)) {
      return InvalidArgument("logit_bias: the bias of token " + std::to_string(token) +
                             " must be in [-100, 100]");
    }
  }
  return OkStatus();
}

Sampler::Sampler(const SamplingParams& params, const std::vector<int32_t>& prompt,
                 std::vector<int32_t> stop_tokens)
    : params_(params), prompt_(prompt), stop_tokens_(std::move(stop_tokens)) {
  rng_.seed(params.seed ? *params.seed : std::random_device{}());
}

void Sampler::ApplyMasksAndBias(float* logits, int vocab, int64_t step) {
  if (params_.allowed_token_ids != nullptr) {
    // The list is sorted and unique: -inf into each gap between allowed ids (no scratch).
    int32_t next = 0;  // the first id not yet masked or kept
    for (int32_t t : *params_.allowed_token_ids) {
      if (t < next || t >= vocab) continue;
      std::fill(logits + next, logits + t, -INFINITY);
      next = t + 1;
    }
    std::fill(logits + next, logits + vocab, -INFINITY);
  }
  // A word's last token is barred while the output ends with the rest of the word (vLLM's
  // _apply_bad_words_single_batch; a one-token word is barred always).
  for (const auto& word : params_.bad_words_token_ids) {
    if (word.empty() || word.size() > output_.size() + 1) continue;
    const size_t prefix = word.size() - 1;
    if (std::equal(word.begin(), word.begin() + static_cast<long>(prefix),
                   output_.end() - static_cast<long>(prefix))) {
      const int32_t last = word.back();
      if (last >= 0 && last < vocab && !std::isnan(logits[last])) logits[last] = -INFINITY;
    }
  }
  // |bias| ≤ 100 (Validate): a finite logit stays finite (FLT_MAX + 100 rounds to FLT_MAX).
  for (const auto& [t, bias] : params_.logit_bias) {
    if (t < 0 || t >= vocab) continue;  // Validate refuses these; never index outside the row
    logits[t] += bias;
  }
  if (step < params_.min_tokens) {
    for (int32_t t : stop_tokens_) {
      if (t >= 0 && t < vocab && !std::isnan(logits[t])) logits[t] = -INFINITY;
    }
  }
}

void Sampler::Accept(int32_t token) {
  ++output_counts_[token];
  if (!params_.bad_words_token_ids.empty()) output_.push_back(token);
}

void Sampler::ApplyPenalties(float* logits, int vocab) {
  if (params_.repetition_penalty != 1.0f) {
    // Same as vLLM / transformers: divide positive logits, multiply negative ones.
    std::vector<uint8_t>& seen = seen_;
    seen.assign(static_cast<size_t>(vocab), 0);
    for (int32_t t : prompt_) seen[static_cast<size_t>(t)] = 1;
    for (const auto& [t, n] : output_counts_) seen[static_cast<size_t>(t)] = 1;
    for (int t = 0; t < vocab; ++t) {
      if (!seen[static_cast<size_t>(t)]) continue;
      float& l = logits[t];
      // A finite logit stays finite: a penalty below ~1e-37 (valid: > 0) turned a positive one
      // into +inf, which the non-finite check then blamed on the model's weights. A non-finite
      // one (the model's) is left for that check.
      const float v = l > 0 ? l / params_.repetition_penalty : l * params_.repetition_penalty;
      constexpr float kMax = std::numeric_limits<float>::max();
      l = std::isfinite(l) ? std::clamp(v, -kMax, kMax) : v;
    }
  }
  if (params_.presence_penalty != 0 || params_.frequency_penalty != 0) {
    for (const auto& [t, n] : output_counts_) {
      logits[t] -= params_.frequency_penalty * static_cast<float>(n) + params_.presence_penalty;
    }
  }
}

namespace {
// The k largest of v [n] into order in one pass, larger first and equal ones in index order
// (what partial_sort by (v desc, index asc) gives): an index enters only above the current
// k-th. A partial_sort of every index cost ~0.35 ms a 151936-token row at k = 50. Used for the
// log-probs' top list (over logits) and top-k / top-p's first try (over probabilities).
void TopByInsertion(const float* v, int n, size_t k, std::vector<int32_t>* order) {
  order->clear();
  float floor = 0;  // the k-th value once k are held
  for (int i = 0; i < n && k > 0; ++i) {
    const float vi = v[i];
    if (order->size() == k && !(vi > floor)) continue;
    auto pos = std::find_if(order->begin(), order->end(), [&](int32_t o) { return v[o] < vi; });
    order->insert(pos, i);
    if (order->size() > k) order->pop_back();
    if (order->size() == k) floor = v[order->back()];
  }
}
}  // namespace

void ComputeLogprobs(const float* logits, int vocab, int32_t token, int top_n,
                     TokenLogprob* chosen, std::vector<TokenLogprob>* top) {
  // The row's maximum from the vectorised greedy scan (a scalar max loop is a chain of maxss,
  // ~1 ns per logit); the caller has rejected NaN and +inf, so `bad` is −1 here.
  int64_t best = -1, bad = -1;
  ScanLogitsRow(logits, vocab, &best, &bad);
  const float mx = best >= 0 ? logits[best] : -INFINITY;
  const double sum = SumExpShifted(logits, vocab, mx);
  const float log_z = mx + static_cast<float>(std::log(sum));
  // A token of probability 0 (a -inf logit) gets vLLM's -9999 instead of -inf, which JSON cannot
  // carry (it would print as null).
  auto clamp = [](float lp) { return std::isfinite(lp) ? lp : -9999.0f; };
  if (chosen) *chosen = {token, clamp(logits[token] - log_z)};
  if (top) {
    // The n largest logits, larger first and equal ones in token order, in one pass (a
    // partial_sort of every index took ~0.24 ms a row).
    std::vector<int32_t> ids;
    TopByInsertion(logits, vocab, static_cast<size_t>(std::max(0, std::min(top_n, vocab))), &ids);
    top->clear();
    for (int32_t id : ids) top->push_back({id, clamp(logits[id] - log_z)});
  }
}

int32_t TokenRank(const float* logits, int vocab, int32_t token) {
  const float mine = logits[token];
  int32_t at_or_above = 0;
  for (int t = 0; t < vocab; ++t) at_or_above += logits[t] >= mine;
  return at_or_above;
}

// Sorting a 150k vocabulary per token costs ~10 ms, so only what a filter needs is ordered:
// top-k ≤ 64 and top-p's first try (the 64 most likely) select in one pass, a larger top-k
// finds its k-th value by bucket counts (O(vocab)), top-p past 64 tokens walks bucket masses
// and orders one bucket; plain temperature sampling and min-p order nothing.
namespace {
// Top-k up to this k selects by insertion in one pass; larger k by KthLargest.
constexpr int kTopKInsertMax = 64;

// A non-negative float's bucket: its bit pattern's top bits (they order as the values do).
// kTopShift = 20 keeps 11 bits (exponent and 3 mantissa bits: buckets 9 % wide).
constexpr int kTopShift = 20;
constexpr int kTopBuckets = 1 << (31 - kTopShift);  // every non-negative float
inline int TopBucket(const float* p, int64_t i) {
  uint32_t bits;
  std::memcpy(&bits, &p[i], sizeof bits);
  return static_cast<int>(bits >> kTopShift);
}

// Walking buckets from the top, adding each to *acc: the first whose addition would reach
// `target` (*acc then holds what lies above it), or 0 when none does (*acc holds them all).
template <typename T, typename A>
int CrossingFromTop(const std::vector<T>& v, A target, A* acc) {
  for (int b = static_cast<int>(v.size()) - 1; b >= 0; --b) {
    if (*acc + v[static_cast<size_t>(b)] >= target) return b;
    *acc += v[static_cast<size_t>(b)];
  }
  return 0;
}

// The top-p set of p [n] (p ≥ 0) without sorting the row: the bit patterns of non-negative
// floats order as their values, so the row is bucketed by its top 11 bits (exponent and 3
// mantissa bits: buckets 9 % wide), the buckets' masses walked from the top to the one where
// the mass reaches `target`, that bucket split again by the next 11 bits, and only the crossing
// sub-bucket's tokens sorted (probability desc, token asc) and taken until it does. order: the
// tokens of the buckets and sub-buckets above, in token order, then those.
// The set is the smallest sorted prefix holding the mass, up to the rounding of the sums. A
// flat 151936-token row needing thousands of tokens took ~3.5 ms with growing partial_sorts.
size_t TopPByBuckets(const float* p, int n, double target, std::vector<int32_t>* order,
                     std::vector<int32_t>* tail) {
  constexpr int kShift = kTopShift;
  constexpr int kBuckets = kTopBuckets;
  auto bucket = [&](int i) { return TopBucket(p, i); };
  std::vector<double> mass(kBuckets, 0.0);
  for (int i = 0; i < n; ++i) mass[static_cast<size_t>(bucket(i))] += p[i];
  double cum = 0;
  // If rounding keeps the mass below target to the end: 0, every token.
  const int crossing = CrossingFromTop(mass, target, &cum);
  order->clear();
  tail->clear();
  for (int i = 0; i < n; ++i) {
    const int b = bucket(i);
    if (b > crossing) order->push_back(i);
    if (b == crossing) tail->push_back(i);
  }
  // The crossing bucket again by its next 11 bits, the same walk: only the tokens of the
  // sub-bucket where the mass crosses are sorted (at temperature 100 a third of a 151936-token
  // row fell in one bucket, ~4 ms of sorting a token).
  auto sub_bucket = [&](int32_t i) {
    uint32_t bits;
    std::memcpy(&bits, &p[i], sizeof bits);
    return static_cast<int>((bits >> (kShift - 11)) & 2047);
  };
  std::vector<double> sub_mass(2048, 0.0);
  for (int32_t t : *tail) sub_mass[static_cast<size_t>(sub_bucket(t))] += p[t];
  const int sub_crossing = CrossingFromTop(sub_mass, target, &cum);
  size_t kept = 0;
  for (int32_t t : *tail) {
    const int b = sub_bucket(t);
    if (b > sub_crossing) order->push_back(t);
    if (b == sub_crossing) (*tail)[kept++] = t;
  }
  tail->resize(kept);
  auto by_prob = [&](int32_t a, int32_t c) { return p[a] > p[c] || (p[a] == p[c] && a < c); };
  if (!std::is_sorted(tail->begin(), tail->end(), by_prob)) {  // equal ones are in token order
    std::sort(tail->begin(), tail->end(), by_prob);
  }
  for (int32_t t : *tail) {
    if (cum >= target) break;
    order->push_back(t);
    cum += p[t];
  }
  return order->size();
}

// The k-th largest of p [n] (p ≥ 0, 0 < k ≤ n) in O(n): counted into the buckets of
// TopPByBuckets, the bucket holding the k-th from the top found, and only its values selected.
// A partial_sort of the row for top_k = 151,935 cost ~26 ms a token (loom_sampler_bench).
float KthLargest(const float* p, int n, size_t k, std::vector<float>* scratch) {
  constexpr int kBuckets = kTopBuckets;
  auto bucket = [&](int i) { return TopBucket(p, i); };
  std::vector<uint32_t> count(kBuckets, 0);
  for (int i = 0; i < n; ++i) ++count[static_cast<size_t>(bucket(i))];
  size_t above = 0;
  const int crossing = CrossingFromTop(count, k, &above);
  scratch->clear();
  for (int i = 0; i < n; ++i) {
    if (bucket(i) == crossing) scratch->push_back(p[i]);
  }
  const auto rank = static_cast<long>(k - above - 1);  // from the top, inside the bucket
  std::nth_element(scratch->begin(), scratch->begin() + rank, scratch->end(),
                   std::greater<float>());
  return (*scratch)[static_cast<size_t>(rank)];
}
}  // namespace

int32_t Sampler::Draw(const float* logits, int vocab, int64_t best) {
  const float inv_t = 1.0f / params_.temperature;
  // max_i (logit_i·(1/T)) = (max_i logit_i)·(1/T): rounding never reverses an order.
  const float mx = logits[best] * inv_t;
  probs_.resize(static_cast<size_t>(vocab));
  double total = 0;
  if (std::isfinite(mx)) {
    // One vector pass (cpu/sample_cpu.h): libm's expf per token was ~0.75 ms a row.
    total = ExpScaledRow(logits, vocab, inv_t, mx, probs_.data());
  } else {  // logit / T overflowed float: subtract the max first, then scale (both ≤ 0)
    const float raw_max = logits[best];
    for (int i = 0; i < vocab; ++i) {
      probs_[static_cast<size_t>(i)] = std::exp((logits[i] - raw_max) * inv_t);
      total += probs_[static_cast<size_t>(i)];
    }
  }
  if (params_.min_p > 0) {
    // min-p first, as vLLM's V1 sampler (an argmax-invariant logits processor, before top-k/p):
    // tokens below min_p × the top probability leave the distribution, and top-p's mass is the
    // survivors' (applied after top-p, as V0 did, it kept more tokens). The top probability is
    // the best token's as computed (exp(0) = 1 only at temperature 1: with 1/T the vector pass
    // fuses logit·(1/T) − max, whose rounding left the top at 1 − 6e-8, below min_p 1's floor,
    // and no candidate at all).
    const float floor = params_.min_p * probs_[static_cast<size_t>(best)];
    total = 0;
    for (int i = 0; i < vocab; ++i) {
      float& p = probs_[static_cast<size_t>(i)];
      if (p < floor) p = 0;
      total += p;
    }
  }
  const bool top_k = params_.top_k > 0 && params_.top_k < vocab;
  if (!top_k && params_.top_p >= 1.0f) {
    // Temperature (and min-p) alone: every token is a candidate, drawn in token order by block
    // masses (cpu/sample_cpu.h) — no candidate list, no serial walk over the whole row.
    const double u = std::uniform_real_distribution<double>(0.0, 1.0)(rng_) * total;
    return static_cast<int32_t>(DrawByMassRow(probs_.data(), vocab, u));
  }
  auto by_prob = [&](int32_t a, int32_t b) {
    const float pa = probs_[static_cast<size_t>(a)], pb = probs_[static_cast<size_t>(b)];
    return pa > pb || (pa == pb && a < b);
  };
  // Top-k keeps every token tied with the k-th (vLLM masks only the logits below it). Up to
  // kTopKInsertMax the survivors are listed in order_ (larger first, ties in token order);
  // past it they are marked in probs_ itself (the others zeroed), found in O(vocab).
  size_t keep = static_cast<size_t>(vocab);
  bool marked = false;
  if (top_k) {
    keep = static_cast<size_t>(params_.top_k);
    if (params_.top_k <= kTopKInsertMax) {
      TopByInsertion(probs_.data(), vocab, keep, &order_);
      // Ties are kept in token order, so those left out follow the last one listed.
      const float kth = order_.empty() ? 0.0f : probs_[static_cast<size_t>(order_.back())];
      for (int i = order_.empty() ? vocab : order_.back() + 1; kth > 0 && i < vocab; ++i) {
        if (probs_[static_cast<size_t>(i)] == kth) order_.push_back(i);
      }
      keep = order_.size();
      total = 0;
      for (size_t i = 0; i < keep; ++i) total += probs_[static_cast<size_t>(order_[i])];
    } else {
      const float kth = KthLargest(probs_.data(), vocab, keep, &kth_scratch_);
      total = 0;
      for (float& p : probs_) {
        if (p < kth) p = 0;
        total += p;
      }
      marked = true;
    }
  }
  if (marked && params_.top_p >= 1.0f) {
    const double u = std::uniform_real_distribution<double>(0.0, 1.0)(rng_) * total;
    return static_cast<int32_t>(DrawByMassRow(probs_.data(), vocab, u));
  }
  if (params_.top_p < 1.0f) {
    const double target = params_.top_p * total;
    bool done = false;
    if (marked) {  // the survivors' top-p set (the zeroed tokens add no mass)
      keep = TopPByBuckets(probs_.data(), vocab, target, &order_, &tail_);
      done = true;
    } else if (!top_k) {  // the usual case first: the top kTopKInsertMax hold the mass
      TopByInsertion(probs_.data(), vocab, std::min<size_t>(keep, kTopKInsertMax), &order_);
      double cum = 0;
      size_t n = 0;
      while (n < order_.size() && cum < target) cum += probs_[static_cast<size_t>(order_[n++])];
      if (cum >= target || order_.size() == keep) {
        keep = n;
      } else {
        keep = TopPByBuckets(probs_.data(), vocab, target, &order_, &tail_);
      }
      done = true;
    }
    for (size_t prefix = std::min<size_t>(keep, 64); !done; prefix = std::min(keep, prefix * 8)) {
      std::partial_sort(order_.begin(), order_.begin() + static_cast<long>(prefix),
                        order_.begin() + static_cast<long>(keep), by_prob);
      double cum = 0;
      size_t n = 0;
      while (n < prefix && cum < target) cum += probs_[static_cast<size_t>(order_[n++])];
      if (cum >= target || prefix == keep) {
        keep = n;
        done = true;
      }
    }
  }
  double mass = 0;
  for (size_t i = 0; i < keep; ++i) mass += probs_[static_cast<size_t>(order_[i])];
  const double u = std::uniform_real_distribution<double>(0.0, 1.0)(rng_) * mass;
  double acc = 0;
  for (size_t i = 0; i < keep; ++i) {
    acc += probs_[static_cast<size_t>(order_[i])];
    if (u < acc) return order_[i];
  }
  if (keep == 0) return -1;  // unreachable with a finite maximum; never read order_[-1]
  return order_[keep - 1];
}

StatusOr<int32_t> Sampler::Sample(float* logits, int vocab, TokenLogprob* chosen,
                                  std::vector<TokenLogprob>* top) {
  const int64_t step = step_++;
  if (vocab <= 0) {
    return InvalidArgument("sampling step " + std::to_string(step) + ": empty logits row");
  }
  // The raw row is kept for log-probs, and under masks to tell the model's -inf row from one
  // the request's constraints emptied.
  const bool constrained = params_.Constrains(step);
  if (params_.logprobs > 0 || constrained) raw_.assign(logits, logits + vocab);
  ApplyMasksAndBias(logits, vocab, step);
  ApplyPenalties(logits, vocab);
  // Every later stage (max, exp, sort, the draw) is defined only when some logit is a number
  // below +inf: NaN compares false with everything, +inf gives inf − inf = NaN. Penalties map
  // NaN to NaN and ±inf to ±inf, so checking after them covers the raw row — unless a
  // constraint masked the token (allowed_token_ids, bad_words, min_tokens set -inf): the raw row
  // is checked too then, or a broken output would pass under a mask and its log-probs (taken
  // from the raw row) come back as NaN, clamped to -9999 without an error.
  // One vector pass (cpu/logits_scan_cpu.h): the scalar loop reread logits[best] every step, a
  // load-compare-cmov chain of ~4 ns per logit, ~0.65 ms per row of a 151936-token vocabulary.
  int64_t best = -1, bad = -1, raw_best = -1;
  ScanLogitsRow(logits, vocab, &best, &bad);
  const float* bad_row = logits;
  if (bad < 0 && constrained) {
    ScanLogitsRow(raw_.data(), vocab, &raw_best, &bad);
    bad_row = raw_.data();
  }
  if (bad >= 0) {
    const float l = bad_row[bad];
    return InvalidArgument("sampling step " + std::to_string(step) + ": logit of token " +
                           std::to_string(bad) + " is " + (std::isnan(l) ? "NaN" : "+inf") +
                           " (non-finite model output; check the weights)");
  }
  if (best < 0) {
    if (raw_best >= 0) {  // the raw row (scanned above when constrained) had a token to draw
      return FailedPrecondition("sampling step " + std::to_string(step) +
                                ": allowed_token_ids, bad_words and min_tokens leave no token "
                                "to draw");
    }
    return InvalidArgument("sampling step " + std::to_string(step) +
                           ": every logit is -inf, no token can be drawn");
  }
  auto token = static_cast<int32_t>(best);  // greedy: the first maximum, as std::max_element
  if (!IsGreedy(params_)) {
    token = Draw(logits, vocab, best);
    if (token < 0) {
      return Internal("sampling step " + std::to_string(step) + ": no candidate token left");
    }
  }
  if (params_.logprobs > 0) ComputeLogprobs(raw_.data(), vocab, token, params_.logprobs, chosen, top);
  return token;
}

}  // namespace loom
