// Shallow personalized PageRank on a CSR graph by sparse frontier propagation.
//
// p_0 = s (the normalised seed vector), then for t iterations
//   lazy:    p <- a * P^T p + (1 - a) * p
//   restart: p <- a * P^T p + (1 - a) * s
// with P the row-normalised weighted adjacency (P[u, v] = w(u, v) / strength(u)).
// Dangling rule: a node of zero strength keeps its own mass, as if it had a
// self-loop (P[u, u] = 1); no dense row is ever built. Each iteration touches
// only the rows of nodes holding mass, so a query costs O(edges in the seeds'
// t-hop neighbourhood), independent of n.
//
// Bounded-error mode (epsilon > 0): the rows of nodes with more than
// kMinSkipSegment neighbours are kept grouped by neighbour type. When such a node u
// with mass m is expanded, a type segment of its row with at least
// kMinSkipSegment entries is skipped if it would add less than epsilon to every
// node in it (a * m * max_w(segment) / strength(u) < epsilon); the mass it would
// have pushed, a * m * strength(segment) / strength(u), is dropped and counted.
// Rows and segments below kMinSkipSegment entries are always expanded, so only
// large fan-outs of little mass (hubs) are cut. Every score is then a lower bound
// of the exact one and ||p_exact - p||_1 <= sum of the dropped mass, reported per
// query. In the last step the skipped contributions are added back, exactly, to
// every node that reaches the top-k test (via the node's own row, which is valid
// when the skipped rows are mirrored: checked once per graph), so near-ties among
// the returned nodes keep their exact order; nodes reached only through skipped
// segments are not candidates.
//
// Push threshold (push_epsilon > 0, either mode): at every step a node whose
// propagated mass per row entry, a * m / degree, is below push_epsilon spreads
// nothing (its a * m is dropped and counted in the error; its row is not even
// read, and a dangling row with zero-weight entries drops it too), so a step reads
// at most a / push_epsilon entries (the mass it spreads is at most 1): hub seeds, and
// the thousands of nodes they reach, no longer make a query's cost grow with their
// degree.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <vector>

namespace noderag {

constexpr int kNumTypes = 7;

// Row offsets of a CSR, int64 or int32 (a graph's compact on-disk form, used as mapped: widening
// it would copy 8 bytes a node at every open).
struct RowPtr {
    const int64_t* p64 = nullptr;
    const int32_t* p32 = nullptr;
    int64_t operator[](int64_t i) const { return p64 ? p64[i] : static_cast<int64_t>(p32[i]); }
};
constexpr int64_t kMinSkipSegment = 64;
// Exact mode on mirrored graphs: at the last step, large segments whose per-node share is
// below this are skipped, their shares added back exactly to the top-k candidates, and the
// result certified (a node reached only through them cannot reach any top-k; else the
// query reruns unpruned). Results stay exact; only the work shrinks.
constexpr double kExactPruneShare = 1e-6;

struct PPRParams {
    double alpha = 0.5;
    int64_t iterations = 2;
    bool restart = true;
    double epsilon = 0.0;
    // Push threshold (0: off): a node u holding mass m at a step spreads a * m along its
    // row only if a * m >= push_epsilon * degree(u) (the residual test of forward push,
    // Andersen-Chung-Lang); otherwise a * m is dropped and counted in the error. Each
    // step then reads at most a / push_epsilon row entries, whatever the
    // seeds' degrees.
    double push_epsilon = 0.0;
    int64_t k_per_type[kNumTypes] = {0, 0, 0, 0, 0, 0, 0};
    int64_t k_max = 0;  // row stride of the output (>= every k_per_type)
};

// Zeroed memory from calloc: the system maps zero pages as they are first touched, so a
// scratch of n entries costs nothing until a query reaches its nodes (no O(n) memset).
struct FreeDeleter {
    void operator()(void* p) const { std::free(p); }
};
template <typename T>
using ZeroedArray = std::unique_ptr<T[], FreeDeleter>;

// Per-thread working memory: a dense accumulator of size n that is zero between
// queries (reset only on the entries a query touched) and sparse vectors.
struct PPRScratch {
    explicit PPRScratch(int64_t n);
    ZeroedArray<double> acc;            // (n,) zero between queries
    std::unique_ptr<int32_t[]> ids[2];  // (n + 1,) ping-pong sparse vectors (ids, mass)
    std::unique_ptr<double[]> mass[2];  // (n + 1,)
    ZeroedArray<double> skip_c;         // (n,) a * m / strength of nodes with skipped segments (last step)
    ZeroedArray<uint8_t> skip_types;    // (n,) bit t set: segment of type t skipped (last step)
    std::vector<int32_t> skipped;       // nodes with skip_types != 0
    std::vector<double> skip_share[kNumTypes];  // per type: a * m * max_w / strength of each skipped segment
    std::vector<int32_t> extra;         // ids written to acc outside of scattered ranges
    std::vector<std::pair<const int32_t*, int64_t>> ranges;  // scattered index ranges this step
    std::vector<int32_t> seed_ids;      // deduplicated normalised seed vector s (nonzero entries)
    std::vector<double> seed_mass;
    std::vector<std::pair<double, int32_t>> heap[kNumTypes];
};

class TopK;  // the per-type bounded heaps of one query (ppr.cpp)

class PPRKernel {
  public:
    // The arrays must stay alive and unmodified for the kernel's lifetime (the
    // Python binding holds references). The constructor checks indptr and the type
    // codes (O(n)); with check_edges also every column id and weight (O(nnz)).
    // Without, a row's ids and weights are checked when a query first reads it
    // (row_strength), so no query ever indexes out of bounds either way.
    PPRKernel(int64_t n, RowPtr indptr, const int32_t* indices, const float* weights,
              const uint8_t* types, bool check_edges = true);

    int64_t n() const { return n_; }
    // The grouped rows and the mirror check are built once, on first use by a mode that
    // reads them (bounded, or exact without a push threshold); O(nnz), every row checked.
    void ensure_grouped() const;
    bool mirrored() const {
        ensure_grouped();
        return mirrored_;
    }
    int64_t n_grouped() const {
        ensure_grouped();
        return static_cast<int64_t>(seg_maxw_.size() / kNumTypes);
    }

    // One query: seeds/weights of length n_seeds (weights need not be normalised;
    // duplicates are summed). Writes out_ids/out_scores of shape (7, k_max).
    void run_one(PPRScratch& scratch, const int32_t* seeds, const float* weights, int64_t n_seeds,
                 const PPRParams& params, int32_t* out_ids, float* out_scores, double* out_error,
                 int64_t* out_support, bool allow_prune = true) const;

    // Q queries (seeds given CSR-style by offsets of length Q + 1) on n_threads threads.
    // Rethrows the first worker exception after all threads joined.
    void run_batch(const int32_t* seeds, const float* weights, const int64_t* offsets, int64_t n_queries,
                   const PPRParams& params, int n_threads, int32_t* out_ids, float* out_scores,
                   double* out_error, int64_t* out_support) const;

    std::unique_ptr<PPRScratch> acquire_scratch() const;
    void release_scratch(std::unique_ptr<PPRScratch> scratch) const;

  private:
    // What one propagation step may skip (see run_one).
    struct StepRule {
        bool bounded;       // epsilon > 0: skip segments below epsilon, their mass counted as dropped
        bool prune;         // exact mode, last step: skip segments below kExactPruneShare, certify after
        bool record_skips;  // remember the skipped segments (last step of a mirrored graph)
        double skip_below;
        double push_below;  // > 0: rows whose mass per entry is below it are not spread
    };
    // a * P^T p of the frontier (fid, fm, nf) into sc.acc, the touched ids into sc.extra / sc.ranges.
    void scatter(PPRScratch& sc, const int32_t* fid, const double* fm, int64_t nf, double a, const StepRule& rule,
                 double& dropped) const;
    // The last step's compaction fused with the top-k selection; returns the support size.
    int64_t select_last(PPRScratch& sc, TopK& topk) const;

    // Sum of row u's weights; throws std::invalid_argument when a column id or weight is invalid.
    double row_strength(int32_t u) const;

    int64_t n_;
    RowPtr indptr_;
    const int32_t* indices_;
    const float* weights_;
    const uint8_t* types_;
    // Rows with more than kMinSkipSegment entries, grouped by neighbour type (stable);
    // built once (ensure_grouped).
    void build_grouped() const;
    mutable std::once_flag grouped_once_;
    mutable std::vector<int32_t> group_of_;     // (n,) index of the grouped row, -1 if not grouped
    mutable std::vector<int64_t> seg_offsets_;  // (groups * 8,) into grouped_indices_/grouped_weights_
    mutable std::vector<double> seg_maxw_;      // (groups * 7,) largest weight per segment
    mutable std::vector<double> seg_strength_;  // (groups * 7,) weight sum per segment
    mutable std::vector<int32_t> grouped_indices_;
    mutable std::vector<float> grouped_weights_;
    mutable int64_t max_grouped_nbrs_[kNumTypes] = {0, 0, 0, 0, 0, 0, 0};  // per type: most grouped rows one node is in
    mutable bool mirrored_ = false;  // every grouped row's entries (u, v, w) have a unique mirror (v, u, w)
    mutable std::mutex pool_mutex_;
    mutable std::vector<std::unique_ptr<PPRScratch>> pool_;
};

}  // namespace noderag
