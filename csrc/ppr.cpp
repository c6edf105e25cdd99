// Shallow personalized PageRank kernel; see ppr.hpp for the semantics.
#include "ppr.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <exception>
#include <functional>
#include <limits>
#include <new>
#include <stdexcept>
#include <string>
#include <thread>

namespace noderag {

namespace {

// (score, id): a ranks above b when its score is larger, ties to the smaller id.
inline bool ranks_above(const std::pair<double, int32_t>& a, const std::pair<double, int32_t>& b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
}

// Moves acc[v] to slot n of the next frontier and clears it; n advances only for a
// non-zero mass, so zero entries are overwritten by the next move.
inline void move_to_frontier(double* acc, int32_t v, int32_t* ids, double* mass, int64_t& n) {
    const double val = acc[v];
    acc[v] = 0.0;
    ids[n] = v;
    mass[n] = val;
    n += (val != 0.0);
}

}  // namespace

// Bounded heaps per type (worst kept element on top). thr_[t] is the score a
// candidate must reach: +inf for k = 0, the smallest positive double while the
// heap is not full (zero scores are never returned), else the heap's worst score
// (equal scores then compare ids in the slow path). In the last step of the
// bounded mode bonus_[t] bounds what the skipped segments could add to a node of
// type t; a candidate within reach gets its exact share added back (correction).
class TopK {
  public:
    TopK(std::vector<std::pair<double, int32_t>>* heaps, const int64_t* k) : heaps_(heaps), k_(k) {
        for (int t = 0; t < kNumTypes; ++t) {
            heaps_[t].clear();
            thr_[t] = k[t] > 0 ? std::numeric_limits<double>::denorm_min() : std::numeric_limits<double>::infinity();
            bonus_[t] = 0.0;
        }
    }
    struct Correction {
        const double* bonus;
        RowPtr indptr;
        const int32_t* indices;
        const float* weights;
        const double* skip_c;
        const uint8_t* skip_types;
        const std::vector<int32_t>* skipped;  // nodes with skipped segments
        const int32_t* group_of;             // grouped rows: segments sorted by id
        const int64_t* seg_offsets;
        const int32_t* grouped_indices;
        const float* grouped_weights;
    };
    void enable_correction(const Correction& c) {
        for (int t = 0; t < kNumTypes; ++t) bonus_[t] = c.bonus[t];
        corr_ = c;
    }
    // True when no node outside the candidates can belong to a top-k: every type with
    // skipped segments has a full heap whose worst score beats what they could give.
    bool certified() const {
        for (int t = 0; t < kNumTypes; ++t) {
            if (bonus_[t] > 0.0 && k_[t] > 0 &&
                (heaps_[t].size() < static_cast<size_t>(k_[t]) || !(thr_[t] > bonus_[t])))
                return false;
        }
        return true;
    }
    inline void offer(int32_t v, double m, int t) {
        if (m + bonus_[t] >= thr_[t] && m != 0.0) slow(v, m, t);
    }

  private:
#if defined(__GNUC__)
    __attribute__((noinline))
#endif
    void slow(int32_t v, double m, int t) {
        if (bonus_[t] > 0.0) {
            // Add back what the skipped segments of type t would have given v: through
            // v's own row (mirrored graph) or, when v's row is long, by a binary search
            // for v in each skipped segment (ids are increasing within a segment).
            const uint8_t bit = static_cast<uint8_t>(1u << t);
            const int64_t b = corr_.indptr[v], e = corr_.indptr[v + 1];
            const int64_t n_skipped = static_cast<int64_t>(corr_.skipped->size());
            if (e - b <= 32 * n_skipped + 64) {
                for (int64_t j = b; j < e; ++j) {
                    const int32_t x = corr_.indices[j];
                    if (corr_.skip_types[x] & bit) m += corr_.skip_c[x] * static_cast<double>(corr_.weights[j]);
                }
            } else {
                for (const int32_t x : *corr_.skipped) {
                    if (!(corr_.skip_types[x] & bit)) continue;
                    const int64_t* off = corr_.seg_offsets + static_cast<int64_t>(corr_.group_of[x]) * (kNumTypes + 1);
                    const int32_t* sb = corr_.grouped_indices + off[t];
                    const int32_t* se = corr_.grouped_indices + off[t + 1];
                    const int32_t* hit = std::lower_bound(sb, se, v);
                    if (hit != se && *hit == v)
                        m += corr_.skip_c[x] * static_cast<double>(corr_.grouped_weights[off[t] + (hit - sb)]);
                }
            }
            if (!(m >= thr_[t])) return;
        }
        auto& h = heaps_[t];
        const size_t k = static_cast<size_t>(k_[t]);
        const std::pair<double, int32_t> cand(m, v);
        if (h.size() < k) {
            h.push_back(cand);
            std::push_heap(h.begin(), h.end(), ranks_above);
        } else if (ranks_above(cand, h.front())) {
            std::pop_heap(h.begin(), h.end(), ranks_above);
            h.back() = cand;
            std::push_heap(h.begin(), h.end(), ranks_above);
        } else {
            return;
        }
        if (h.size() == k) thr_[t] = h.front().first;
    }

    std::vector<std::pair<double, int32_t>>* heaps_;
    const int64_t* k_;
    double thr_[kNumTypes];
    double bonus_[kNumTypes];
    Correction corr_{};
};

PPRScratch::PPRScratch(int64_t n)
    : acc(static_cast<double*>(std::calloc(static_cast<size_t>(std::max<int64_t>(n, 1)), sizeof(double)))),
      skip_c(static_cast<double*>(std::calloc(static_cast<size_t>(std::max<int64_t>(n, 1)), sizeof(double)))),
      skip_types(static_cast<uint8_t*>(std::calloc(static_cast<size_t>(std::max<int64_t>(n, 1)), 1))) {
    if (!acc || !skip_c || !skip_types) throw std::bad_alloc();
    for (int b = 0; b < 2; ++b) {  // uninitialised: pages are only mapped when a query reaches them
        ids[b].reset(new int32_t[static_cast<size_t>(n) + 1]);
        mass[b].reset(new double[static_cast<size_t>(n) + 1]);
    }
}

PPRKernel::PPRKernel(int64_t n, RowPtr indptr, const int32_t* indices, const float* weights,
                     const uint8_t* types, bool check_edges)
    : n_(n), indptr_(indptr), indices_(indices), weights_(weights), types_(types) {
    if (n < 0 || n > INT32_MAX) throw std::invalid_argument("n must lie in [0, 2^31 - 1]");
    if (indptr[0] != 0) throw std::invalid_argument("indptr[0] must be 0");
    // indptr first, on its own: with indptr[n] == nnz (checked by the caller) a non-decreasing indptr keeps every
    // row inside the edge arrays, so no row read ever reaches past them (a damaged middle value would).
    for (int64_t u = 0; u < n; ++u) {
        if (indptr[u + 1] < indptr[u]) throw std::invalid_argument("indptr must be non-decreasing");
        if (types[u] >= kNumTypes) throw std::invalid_argument("node type codes must lie in [0, 7)");
    }
    if (check_edges)
        for (int64_t u = 0; u < n; ++u) row_strength(static_cast<int32_t>(u));
}

double PPRKernel::row_strength(int32_t u) const {
    const int64_t b = indptr_[u], e = indptr_[u + 1];
    double s = 0.0;
    bool ids_ok = true, weights_ok = true;
    for (int64_t j = b; j < e; ++j) {  // branch-free checks
        const float w = weights_[j];
        ids_ok &= static_cast<uint32_t>(indices_[j]) < static_cast<uint32_t>(n_);
        weights_ok &= (w >= 0.0f) & (w <= std::numeric_limits<float>::max());
        s += w;
    }
    if (!ids_ok) throw std::invalid_argument("indices must lie in [0, n) (row " + std::to_string(u) + ")");
    if (!weights_ok) throw std::invalid_argument("weights must be finite and >= 0 (row " + std::to_string(u) + ")");
    return s;
}

void PPRKernel::ensure_grouped() const {
    std::call_once(grouped_once_, [this]() { build_grouped(); });
}

void PPRKernel::build_grouped() const {
    const int64_t n = n_;
    const RowPtr indptr = indptr_;
    const int32_t* const indices = indices_;
    const float* const weights = weights_;
    const uint8_t* const types = types_;
    group_of_.assign(static_cast<size_t>(n), -1);
    int64_t grouped_nnz = 0, groups = 0;
    bool sorted = true;
    for (int64_t u = 0; u < n; ++u) {  // every row checked (row_strength): the correction reads any row
        const int64_t d = indptr[u + 1] - indptr[u];
        const double strength = row_strength(static_cast<int32_t>(u));
        for (int64_t j = indptr[u] + 1; j < indptr[u + 1]; ++j) sorted &= indices[j] > indices[j - 1];
        if (d > kMinSkipSegment && strength > 0.0) {
            group_of_[u] = static_cast<int32_t>(groups++);
            grouped_nnz += d;
        }
    }
    // Group the large rows by neighbour type (stable, so ids stay increasing in a segment).
    seg_offsets_.assign(static_cast<size_t>(groups * (kNumTypes + 1)), 0);
    seg_maxw_.assign(static_cast<size_t>(groups * kNumTypes), 0.0);
    seg_strength_.assign(static_cast<size_t>(groups * kNumTypes), 0.0);
    grouped_indices_.resize(static_cast<size_t>(grouped_nnz));
    grouped_weights_.resize(static_cast<size_t>(grouped_nnz));
    int64_t pos = 0;
    for (int64_t u = 0; u < n; ++u) {
        const int64_t g = group_of_[u];
        if (g < 0) continue;
        const int64_t b = indptr[u], e = indptr[u + 1];
        int64_t count[kNumTypes] = {0, 0, 0, 0, 0, 0, 0};
        for (int64_t j = b; j < e; ++j) ++count[types[indices[j]]];
        int64_t* off = &seg_offsets_[static_cast<size_t>(g * (kNumTypes + 1))];
        off[0] = pos;
        for (int t = 0; t < kNumTypes; ++t) off[t + 1] = off[t] + count[t];
        int64_t fill[kNumTypes];
        for (int t = 0; t < kNumTypes; ++t) fill[t] = off[t];
        double* maxw = &seg_maxw_[static_cast<size_t>(g * kNumTypes)];
        double* strength = &seg_strength_[static_cast<size_t>(g * kNumTypes)];
        for (int64_t j = b; j < e; ++j) {
            const int t = types[indices[j]];
            grouped_indices_[static_cast<size_t>(fill[t])] = indices[j];
            grouped_weights_[static_cast<size_t>(fill[t]++)] = weights[j];
            maxw[t] = std::max(maxw[t], static_cast<double>(weights[j]));
            strength[t] += weights[j];
        }
        pos = off[kNumTypes];
    }
    // How many grouped rows contain one node, at most, per node type: a node of type t
    // gets shares from at most that many skipped segments (bounds the correction).
    {
        std::vector<int32_t> count(static_cast<size_t>(n), 0);
        for (int64_t j = 0; j < grouped_nnz; ++j) ++count[static_cast<size_t>(grouped_indices_[static_cast<size_t>(j)])];
        for (int64_t v = 0; v < n; ++v)
            max_grouped_nbrs_[types[v]] = std::max<int64_t>(max_grouped_nbrs_[types[v]], count[static_cast<size_t>(v)]);
    }
    // Mirror check for the last-step correction: every entry (u, v, w) of a grouped
    // row u has exactly one mirror (v, u, w), and no other row points at u. Two
    // sequential passes: the entries pointing at each grouped row are bucketed (in
    // increasing source order), then each bucket must equal the row itself.
    mirrored_ = sorted;
    if (mirrored_ && groups > 0) {
        std::vector<int64_t> cursor(static_cast<size_t>(groups), 0);
        const int64_t nnz = indptr[n];
        for (int64_t j = 0; j < nnz; ++j) {
            const int32_t g = group_of_[indices[j]];
            if (g >= 0) ++cursor[static_cast<size_t>(g)];
        }
        for (int64_t u = 0; u < n && mirrored_; ++u) {
            const int32_t g = group_of_[u];
            if (g < 0) continue;
            const int64_t start = seg_offsets_[static_cast<size_t>(g) * (kNumTypes + 1)];
            if (cursor[static_cast<size_t>(g)] != indptr[u + 1] - indptr[u]) mirrored_ = false;
            cursor[static_cast<size_t>(g)] = start;
        }
        if (mirrored_) {
            std::vector<int32_t> src(static_cast<size_t>(grouped_nnz));
            std::vector<float> w(static_cast<size_t>(grouped_nnz));
            for (int64_t v = 0; v < n; ++v) {
                const int64_t e = indptr[v + 1];
                for (int64_t j = indptr[v]; j < e; ++j) {
                    const int32_t g = group_of_[indices[j]];
                    if (g < 0) continue;
                    const int64_t slot = cursor[static_cast<size_t>(g)]++;
                    src[static_cast<size_t>(slot)] = static_cast<int32_t>(v);
                    w[static_cast<size_t>(slot)] = weights[j];
                }
            }
            for (int64_t u = 0; u < n && mirrored_; ++u) {
                const int32_t g = group_of_[u];
                if (g < 0) continue;
                const int64_t start = seg_offsets_[static_cast<size_t>(g) * (kNumTypes + 1)];
                const int64_t b = indptr[u], d = indptr[u + 1] - b;
                for (int64_t i = 0; i < d; ++i) {
                    if (src[static_cast<size_t>(start + i)] != indices[b + i] ||
                        w[static_cast<size_t>(start + i)] != weights[b + i]) {
                        mirrored_ = false;
                        break;
                    }
                }
            }
        }
    }
}

std::unique_ptr<PPRScratch> PPRKernel::acquire_scratch() const {
    {
        std::lock_guard<std::mutex> lock(pool_mutex_);
        if (!pool_.empty()) {
            auto s = std::move(pool_.back());
            pool_.pop_back();
            return s;
        }
    }
    return std::make_unique<PPRScratch>(n_);
}

void PPRKernel::release_scratch(std::unique_ptr<PPRScratch> scratch) const {
    std::lock_guard<std::mutex> lock(pool_mutex_);
    pool_.push_back(std::move(scratch));
}

// The normalised, deduplicated seed vector s (first-occurrence order, zero entries dropped) as the first
// frontier (fid, fm, nf) and in sc.seed_ids / sc.seed_mass.
static void seed_frontier(PPRScratch& sc, const int32_t* seeds, const float* weights, int64_t n_seeds,
                          int32_t* fid, double* fm, int64_t& nf) {
    double total = 0.0;
    for (int64_t i = 0; i < n_seeds; ++i) total += static_cast<double>(weights[i]);
    if (!(total > 0.0) || !std::isfinite(total)) throw std::invalid_argument("seed weights must sum to a positive finite value");
    double* const acc = sc.acc.get();
    for (int64_t i = 0; i < n_seeds; ++i) acc[seeds[i]] += static_cast<double>(weights[i]) / total;
    for (int64_t i = 0; i < n_seeds; ++i) move_to_frontier(acc, seeds[i], fid, fm, nf);
    sc.seed_ids.assign(fid, fid + nf);
    sc.seed_mass.assign(fm, fm + nf);
}

// The per-type heaps, best first, as rows of out_ids / out_scores (shape (7, K), -1 / 0 padded).
static void write_rows(PPRScratch& sc, int64_t K, int32_t* out_ids, float* out_scores) {
    for (int t = 0; t < kNumTypes; ++t) {
        auto& h = sc.heap[t];
        std::sort_heap(h.begin(), h.end(), ranks_above);  // best first
        int32_t* ids_row = out_ids + t * K;
        float* sc_row = out_scores + t * K;
        const int64_t m = static_cast<int64_t>(h.size());
        for (int64_t j = 0; j < m; ++j) {
            ids_row[j] = h[j].second;
            sc_row[j] = static_cast<float>(h[j].first);
        }
        for (int64_t j = m; j < K; ++j) {
            ids_row[j] = -1;
            sc_row[j] = 0.0f;
        }
    }
}

void PPRKernel::scatter(PPRScratch& sc, const int32_t* fid, const double* fm, int64_t nf, double a,
                        const StepRule& rule, double& dropped) const {
    double* const acc = sc.acc.get();
    const RowPtr indptr = indptr_;
    const int32_t* const indices = indices_;
    const float* const wts = weights_;
    double* const skip_c = sc.skip_c.get();
    uint8_t* const skip_types = sc.skip_types.get();
    auto& extra = sc.extra;
    auto& ranges = sc.ranges;
    for (int64_t i = 0; i < nf; ++i) {  // every frontier mass is nonzero
        const double m = fm[i];
        const int32_t u = fid[i];
        if (rule.push_below > 0.0 && a * m < rule.push_below * static_cast<double>(indptr[u + 1] - indptr[u])) {
            dropped += a * m;  // too little mass per entry to spread (forward push's residual test): row unread
            continue;
        }
        const double row_s = row_strength(u);  // the row's checks, as it is read
        if (row_s == 0.0) {  // dangling: keeps its mass (self-loop)
            acc[u] += a * m;
            extra.push_back(u);
            continue;
        }
        const double is = 1.0 / row_s;
        const double c = a * m * is;
        const int32_t g = (rule.bounded || rule.prune) ? group_of_[u] : -1;
        if (g < 0) {
            const int64_t b = indptr[u], e = indptr[u + 1];
            for (int64_t j = b; j < e; ++j) acc[indices[j]] += c * static_cast<double>(wts[j]);
            ranges.emplace_back(indices + b, e - b);
            continue;
        }
        const int64_t* off = &seg_offsets_[static_cast<size_t>(g) * (kNumTypes + 1)];
        const double* maxw = &seg_maxw_[static_cast<size_t>(g) * kNumTypes];
        const double* strength = &seg_strength_[static_cast<size_t>(g) * kNumTypes];
        uint8_t mask = 0;
        for (int t = 0; t < kNumTypes; ++t) {
            const int64_t b = off[t], e = off[t + 1];
            if (e == b) continue;
            if (e - b >= kMinSkipSegment && c * maxw[t] < rule.skip_below) {
                if (rule.bounded) dropped += c * strength[t];
                if (rule.record_skips) {
                    mask = static_cast<uint8_t>(mask | (1u << t));
                    sc.skip_share[t].push_back(c * maxw[t]);
                }
                continue;
            }
            const int32_t* gi = grouped_indices_.data();
            const float* gw = grouped_weights_.data();
            for (int64_t j = b; j < e; ++j) acc[gi[j]] += c * static_cast<double>(gw[j]);
            ranges.emplace_back(gi + b, e - b);
        }
        if (mask) {
            skip_c[u] = c;
            skip_types[u] = mask;
            sc.skipped.push_back(u);
        }
    }
}

int64_t PPRKernel::select_last(PPRScratch& sc, TopK& topk) const {
    double* const acc = sc.acc.get();
    const uint8_t* const types = types_;
    double bonus[kNumTypes] = {0, 0, 0, 0, 0, 0, 0};
    if (!sc.skipped.empty()) {
        // bonus[t]: the most the skipped segments can give one node of type t, the
        // sum of its max_grouped_nbrs_[t] largest shares.
        for (int t = 0; t < kNumTypes; ++t) {
            auto& sh = sc.skip_share[t];
            const size_t d = static_cast<size_t>(max_grouped_nbrs_[t]);
            if (sh.size() > d) std::nth_element(sh.begin(), sh.begin() + static_cast<std::ptrdiff_t>(d), sh.end(), std::greater<double>());
            const size_t take = std::min(d, sh.size());
            for (size_t i = 0; i < take; ++i) bonus[t] += sh[i];
        }
        topk.enable_correction({bonus, indptr_, indices_, weights_, sc.skip_c.get(), sc.skip_types.get(), &sc.skipped,
                                group_of_.data(), seg_offsets_.data(), grouped_indices_.data(),
                                grouped_weights_.data()});
    }
    int64_t cnt = 0;
    for (const int32_t v : sc.extra) {
        const double val = acc[v];
        acc[v] = 0.0;
        cnt += (val != 0.0);
        topk.offer(v, val, types[v]);
    }
    for (const auto& r : sc.ranges) {
        const int32_t* idx = r.first;
        const int64_t len = r.second;
        for (int64_t j = 0; j < len; ++j) {
            const int32_t v = idx[j];
            const double val = acc[v];
            acc[v] = 0.0;
            cnt += (val != 0.0);
            topk.offer(v, val, types[v]);
        }
    }
    for (const int32_t u : sc.skipped) {
        sc.skip_c[u] = 0.0;
        sc.skip_types[u] = 0;
    }
    return cnt;
}

void PPRKernel::run_one(PPRScratch& sc, const int32_t* seeds, const float* weights, int64_t n_seeds,
                        const PPRParams& prm, int32_t* out_ids, float* out_scores, double* out_error,
                        int64_t* out_support, bool allow_prune) const {
    const bool bounded = prm.epsilon > 0.0;
    // The exact mode's last-step pruning is for queries without a push threshold (which bounds every step);
    // the grouped rows (an O(nnz) pass, once per graph) are built only for a mode that reads them.
    allow_prune = allow_prune && prm.push_epsilon == 0.0;
    if (bounded || allow_prune) ensure_grouped();
    const bool mirrored = (bounded || allow_prune) && mirrored_;
    // Invariant: acc is all zero between steps. A step adds into acc, then one
    // compaction pass over every id it added to (the `extra` ids and the scattered
    // index ranges) moves the nonzero entries into a sparse vector and zeroes them;
    // later duplicates read 0 and are dropped. Tracking the support this way costs
    // no per-edge bookkeeping in the scatter loop.
    double* const acc = sc.acc.get();
    const double a = prm.alpha, one_minus_a = 1.0 - prm.alpha;
    int cur = 0;
    int32_t* fid = sc.ids[cur].get();
    double* fm = sc.mass[cur].get();
    int64_t nf = 0;
    seed_frontier(sc, seeds, weights, n_seeds, fid, fm, nf);

    TopK topk(sc.heap, prm.k_per_type);
    double dropped = 0.0;
    auto& extra = sc.extra;
    auto& ranges = sc.ranges;
    sc.skipped.clear();
    for (auto& sh : sc.skip_share) sh.clear();
    bool pruned_any = false;
    for (int64_t it = 0; it < prm.iterations; ++it) {
        const bool last = it + 1 == prm.iterations;
        // Exact-mode pruning (last step, mirrored graphs): large segments whose per-node
        // share is below kExactPruneShare are skipped and added back to the candidates;
        // the result is certified afterwards (no node reached only through them can
        // enter a top-k), else the query reruns without pruning.
        const bool prune = !bounded && allow_prune && last && mirrored;
        const StepRule rule{bounded, prune, last && mirrored, bounded ? prm.epsilon : kExactPruneShare,
                            prm.push_epsilon};
        extra.clear();
        ranges.clear();
        // Non-propagating term: (1 - a) * s (restart) or (1 - a) * p (lazy).
        if (prm.restart) {
            const int64_t n_s = static_cast<int64_t>(sc.seed_ids.size());
            for (int64_t i = 0; i < n_s; ++i) acc[sc.seed_ids[i]] += one_minus_a * sc.seed_mass[i];
            extra.insert(extra.end(), sc.seed_ids.begin(), sc.seed_ids.end());
        } else {
            for (int64_t i = 0; i < nf; ++i) acc[fid[i]] += one_minus_a * fm[i];
            extra.insert(extra.end(), fid, fid + nf);
        }
        if (a > 0.0) scatter(sc, fid, fm, nf, a, rule, dropped);
        if (last) {
            pruned_any = prune && !sc.skipped.empty();
            nf = select_last(sc, topk);  // compaction fused with the top-k selection
            break;
        }
        // Compaction into the other buffer.
        int64_t cnt = 0;
        int32_t* const nid = sc.ids[1 - cur].get();
        double* const nm = sc.mass[1 - cur].get();
        for (const int32_t v : extra) move_to_frontier(acc, v, nid, nm, cnt);
        for (const auto& r : ranges) {
            const int32_t* idx = r.first;
            const int64_t len = r.second;
            for (int64_t j = 0; j < len; ++j) move_to_frontier(acc, idx[j], nid, nm, cnt);
        }
        cur = 1 - cur;
        fid = nid;
        fm = nm;
        nf = cnt;
    }
    if (prm.iterations == 0)
        for (int64_t i = 0; i < nf; ++i) topk.offer(fid[i], fm[i], types_[fid[i]]);

    if (pruned_any && !topk.certified())
        return run_one(sc, seeds, weights, n_seeds, prm, out_ids, out_scores, out_error, out_support, false);
    write_rows(sc, prm.k_max, out_ids, out_scores);
    *out_error = dropped;
    *out_support = nf;
}

void PPRKernel::run_batch(const int32_t* seeds, const float* weights, const int64_t* offsets, int64_t n_queries,
                          const PPRParams& prm, int n_threads, int32_t* out_ids, float* out_scores,
                          double* out_error, int64_t* out_support) const {
    const int64_t stride = kNumTypes * prm.k_max;
    if (prm.epsilon > 0.0 || prm.push_epsilon == 0.0) ensure_grouped();  // once, before the threads start
    auto do_query = [&](PPRScratch& sc, int64_t q) {
        const int64_t b = offsets[q], e = offsets[q + 1];
        run_one(sc, seeds + b, weights + b, e - b, prm, out_ids + q * stride, out_scores + q * stride,
                out_error + q, out_support + q);
    };
    // More threads than cores only adds scratch memory (O(n) each).
    const int64_t hw = std::max<int64_t>(1, static_cast<int64_t>(std::thread::hardware_concurrency()));
    const int64_t threads = std::max<int64_t>(1, std::min<int64_t>({static_cast<int64_t>(n_threads), n_queries, hw}));
    if (threads == 1) {
        auto sc = acquire_scratch();
        for (int64_t q = 0; q < n_queries; ++q) do_query(*sc, q);
        release_scratch(std::move(sc));
        return;
    }
    std::atomic<int64_t> next(0);
    std::vector<std::exception_ptr> errors(static_cast<size_t>(threads));
    std::vector<std::thread> pool;
    pool.reserve(static_cast<size_t>(threads));
    for (int64_t w = 0; w < threads; ++w) {
        pool.emplace_back([&, w]() {
            try {
                auto sc = acquire_scratch();
                for (int64_t q = next.fetch_add(1); q < n_queries; q = next.fetch_add(1)) do_query(*sc, q);
                release_scratch(std::move(sc));
            } catch (...) {
                errors[static_cast<size_t>(w)] = std::current_exception();
                next.store(n_queries);  // stop the others early
            }
        });
    }
    for (auto& th : pool) th.join();
    for (auto& err : errors)
        if (err) std::rethrow_exception(err);
}

}  // namespace noderag
