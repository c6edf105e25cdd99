// Shallow personalized PageRank kernel; see ppr.hpp for the semantics.
#include "ppr.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <exception>
#include <limits>
#include <stdexcept>
#include <string>
#include <thread>

namespace noderag {

namespace {

// (score, id): a ranks above b when its score is larger, ties to the smaller id.
inline bool ranks_above(const std::pair<double, int32_t>& a, const std::pair<double, int32_t>& b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
}

// Bounded heaps per type (worst kept element on top). thr[t] is the score a
// candidate must reach to be looked at: +inf for k = 0, the smallest positive
// double while the heap is not full (zero scores are never returned), else the
// heap's worst score (equal scores then compare ids in the slow path).
class TopK {
  public:
    TopK(std::vector<std::pair<double, int32_t>>* heaps, const int64_t* k) : heaps_(heaps), k_(k) {
        for (int t = 0; t < kNumTypes; ++t) {
            heaps_[t].clear();
            thr_[t] = k[t] > 0 ? std::numeric_limits<double>::denorm_min() : std::numeric_limits<double>::infinity();
        }
    }
    inline void offer(int32_t v, double m, int t) {
        if (m >= thr_[t]) slow(v, m, t);
    }

  private:
#if defined(__GNUC__)
    __attribute__((noinline))
#endif
    void slow(int32_t v, double m, int t) {
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
};

}  // namespace

PPRScratch::PPRScratch(int64_t n) : acc(new double[static_cast<size_t>(n)]()) {
    for (int b = 0; b < 2; ++b) {  // uninitialised: pages are only mapped when a query reaches them
        ids[b].reset(new int32_t[static_cast<size_t>(n) + 1]);
        mass[b].reset(new double[static_cast<size_t>(n) + 1]);
    }
}

PPRKernel::PPRKernel(int64_t n, const int64_t* indptr, const int32_t* indices, const float* weights,
                     const uint8_t* types)
    : n_(n), indptr_(indptr), indices_(indices), weights_(weights), types_(types) {
    if (n < 0 || n > INT32_MAX) throw std::invalid_argument("n must lie in [0, 2^31 - 1]");
    if (indptr[0] != 0) throw std::invalid_argument("indptr[0] must be 0");
    inv_strength_.assign(static_cast<size_t>(n), 0.0);
    max_share_.assign(static_cast<size_t>(n), 0.0);
    for (int64_t u = 0; u < n; ++u) {
        const int64_t b = indptr[u], e = indptr[u + 1];
        if (e < b) throw std::invalid_argument("indptr must be non-decreasing");
        if (types[u] >= kNumTypes) throw std::invalid_argument("node type codes must lie in [0, 7)");
        double s = 0.0, wmax = 0.0;
        for (int64_t j = b; j < e; ++j) {
            const int32_t v = indices[j];
            if (v < 0 || v >= n) throw std::invalid_argument("indices must lie in [0, n)");
            const double w = weights[j];
            if (!(w >= 0.0) || !std::isfinite(w)) throw std::invalid_argument("weights must be finite and >= 0");
            s += w;
            wmax = std::max(wmax, w);
        }
        if (s > 0.0) {
            inv_strength_[u] = 1.0 / s;
            max_share_[u] = wmax / s;
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

void PPRKernel::run_one(PPRScratch& sc, const int32_t* seeds, const float* weights, int64_t n_seeds,
                        const PPRParams& prm, int32_t* out_ids, float* out_scores, double* out_error,
                        int64_t* out_support) const {
    // Invariant: acc is all zero between steps. A step adds into acc, then one
    // compaction pass over every id it added to (the `extra` ids and the columns of
    // the scattered rows) moves the nonzero entries into a sparse vector and zeroes
    // them; later duplicates read 0 and are dropped. Tracking the support this way
    // costs no per-edge bookkeeping in the scatter loop.
    double* const acc = sc.acc.get();
    const int64_t* const indptr = indptr_;
    const int32_t* const indices = indices_;
    const float* const wts = weights_;
    const double* const inv_s = inv_strength_.data();
    const double* const max_share = max_share_.data();
    const double a = prm.alpha, one_minus_a = 1.0 - prm.alpha;

    double total = 0.0;
    for (int64_t i = 0; i < n_seeds; ++i) total += static_cast<double>(weights[i]);
    if (!(total > 0.0) || !std::isfinite(total)) throw std::invalid_argument("seed weights must sum to a positive finite value");

    int cur = 0;
    int32_t* fid = sc.ids[cur].get();
    double* fm = sc.mass[cur].get();
    int64_t nf = 0;
    // Normalised, deduplicated seed vector s (first-occurrence order, zero entries dropped).
    for (int64_t i = 0; i < n_seeds; ++i) acc[seeds[i]] += static_cast<double>(weights[i]) / total;
    for (int64_t i = 0; i < n_seeds; ++i) {
        const int32_t v = seeds[i];
        const double val = acc[v];
        acc[v] = 0.0;
        fid[nf] = v;
        fm[nf] = val;
        nf += (val != 0.0);
    }
    sc.seed_ids.assign(fid, fid + nf);
    sc.seed_mass.assign(fm, fm + nf);

    const uint8_t* const types = types_;
    TopK topk(sc.heap, prm.k_per_type);
    double dropped = 0.0;
    const bool bounded = prm.epsilon > 0.0;
    auto& extra = sc.extra;
    auto& rows = sc.rows;
    for (int64_t it = 0; it < prm.iterations; ++it) {
        extra.clear();
        rows.clear();
        // Non-propagating term: (1 - a) * s (restart) or (1 - a) * p (lazy).
        if (prm.restart) {
            const int64_t n_s = static_cast<int64_t>(sc.seed_ids.size());
            for (int64_t i = 0; i < n_s; ++i) acc[sc.seed_ids[i]] += one_minus_a * sc.seed_mass[i];
            extra.insert(extra.end(), sc.seed_ids.begin(), sc.seed_ids.end());
        } else {
            for (int64_t i = 0; i < nf; ++i) acc[fid[i]] += one_minus_a * fm[i];
            extra.insert(extra.end(), fid, fid + nf);
        }
        // a * P^T p over the frontier (all its masses are nonzero).
        if (a > 0.0) {
            for (int64_t i = 0; i < nf; ++i) {
                const double m = fm[i];
                const int32_t u = fid[i];
                const double is = inv_s[u];
                if (is == 0.0) {  // dangling: keeps its mass (self-loop)
                    acc[u] += a * m;
                    extra.push_back(u);
                    continue;
                }
                if (bounded && m * max_share[u] < prm.epsilon) {
                    dropped += m;
                    continue;
                }
                rows.push_back(u);
                const double c = a * m * is;
                const int64_t e = indptr[u + 1];
                for (int64_t j = indptr[u]; j < e; ++j) acc[indices[j]] += c * static_cast<double>(wts[j]);
            }
        }
        int64_t cnt = 0;
        if (it + 1 == prm.iterations) {
            // Last step: compaction fused with the top-k selection.
            for (const int32_t v : extra) {
                const double val = acc[v];
                acc[v] = 0.0;
                cnt += (val != 0.0);
                topk.offer(v, val, types[v]);
            }
            for (const int32_t u : rows) {
                const int64_t e = indptr[u + 1];
                for (int64_t j = indptr[u]; j < e; ++j) {
                    const int32_t v = indices[j];
                    const double val = acc[v];
                    acc[v] = 0.0;
                    cnt += (val != 0.0);
                    topk.offer(v, val, types[v]);
                }
            }
            nf = cnt;
            break;
        }
        // Compaction into the other buffer.
        int32_t* const nid = sc.ids[1 - cur].get();
        double* const nm = sc.mass[1 - cur].get();
        for (const int32_t v : extra) {
            const double val = acc[v];
            acc[v] = 0.0;
            nid[cnt] = v;
            nm[cnt] = val;
            cnt += (val != 0.0);
        }
        for (const int32_t u : rows) {
            const int64_t e = indptr[u + 1];
            for (int64_t j = indptr[u]; j < e; ++j) {
                const int32_t v = indices[j];
                const double val = acc[v];
                acc[v] = 0.0;
                nid[cnt] = v;
                nm[cnt] = val;
                cnt += (val != 0.0);
            }
        }
        cur = 1 - cur;
        fid = nid;
        fm = nm;
        nf = cnt;
    }
    if (prm.iterations == 0)
        for (int64_t i = 0; i < nf; ++i) topk.offer(fid[i], fm[i], types[fid[i]]);

    const int64_t K = prm.k_max;
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
    *out_error = a * dropped;
    *out_support = nf;
}

void PPRKernel::run_batch(const int32_t* seeds, const float* weights, const int64_t* offsets, int64_t n_queries,
                          const PPRParams& prm, int n_threads, int32_t* out_ids, float* out_scores,
                          double* out_error, int64_t* out_support) const {
    const int64_t stride = kNumTypes * prm.k_max;
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
