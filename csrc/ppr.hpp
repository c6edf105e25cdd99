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
// Bounded-error mode (epsilon > 0): a node u holding mass m is not expanded when
// m * max_v w(u, v) / strength(u) < epsilon (no neighbour would receive more than
// a * epsilon from it); the a * m it would have pushed is dropped. Every score is
// then a lower bound of the exact one and ||p_exact - p||_1 <= a * sum(dropped m),
// which is reported per query.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

namespace noderag {

constexpr int kNumTypes = 7;

struct PPRParams {
    double alpha = 0.5;
    int64_t iterations = 2;
    bool restart = true;
    double epsilon = 0.0;
    int64_t k_per_type[kNumTypes] = {0, 0, 0, 0, 0, 0, 0};
    int64_t k_max = 0;  // row stride of the output (>= every k_per_type)
};

// Per-thread working memory: a dense accumulator of size n that is zero between
// queries (reset only on the entries a query touched) and sparse vectors.
struct PPRScratch {
    explicit PPRScratch(int64_t n);
    std::unique_ptr<double[]> acc;    // (n,) zero between queries
    std::unique_ptr<int32_t[]> ids[2];  // (n + 1,) ping-pong sparse vectors (ids, mass)
    std::unique_ptr<double[]> mass[2];  // (n + 1,)
    std::vector<int32_t> extra;       // ids written to acc outside of scattered rows
    std::vector<int32_t> rows;        // nodes whose rows were scattered this step
    std::vector<int32_t> seed_ids;    // deduplicated normalised seed vector s (nonzero entries)
    std::vector<double> seed_mass;
    std::vector<std::pair<double, int32_t>> heap[kNumTypes];
};

class PPRKernel {
  public:
    // The arrays must stay alive and unmodified for the kernel's lifetime (the
    // Python binding holds references). Inputs are trusted (validated by caller)
    // except for the cheap guards in the constructor.
    PPRKernel(int64_t n, const int64_t* indptr, const int32_t* indices, const float* weights,
              const uint8_t* types);

    int64_t n() const { return n_; }

    // One query: seeds/weights of length n_seeds (weights need not be normalised;
    // duplicates are summed). Writes out_ids/out_scores of shape (7, k_max).
    void run_one(PPRScratch& scratch, const int32_t* seeds, const float* weights, int64_t n_seeds,
                 const PPRParams& params, int32_t* out_ids, float* out_scores, double* out_error,
                 int64_t* out_support) const;

    // Q queries (seeds given CSR-style by offsets of length Q + 1) on n_threads threads.
    // Rethrows the first worker exception after all threads joined.
    void run_batch(const int32_t* seeds, const float* weights, const int64_t* offsets, int64_t n_queries,
                   const PPRParams& params, int n_threads, int32_t* out_ids, float* out_scores,
                   double* out_error, int64_t* out_support) const;

    std::unique_ptr<PPRScratch> acquire_scratch() const;
    void release_scratch(std::unique_ptr<PPRScratch> scratch) const;

  private:
    int64_t n_;
    const int64_t* indptr_;
    const int32_t* indices_;
    const float* weights_;
    const uint8_t* types_;
    std::vector<double> inv_strength_;  // 1 / strength, 0 for dangling nodes
    std::vector<double> max_share_;     // max_v w(u, v) / strength(u), 0 for dangling nodes
    mutable std::mutex pool_mutex_;
    mutable std::vector<std::unique_ptr<PPRScratch>> pool_;
};

}  // namespace noderag
