// BM25 posting sums of a query: noderag._core.sum_postings (one scratch entry a passage) and
// noderag._core.sum_runs (runs ascending by passage, swept block by block), and the per-run impacts on a few
// passages (noderag._core.run_impacts).
// Arrays arrive C-contiguous with the exact dtypes (no implicit casts, so mapped impacts are never
// copied); the Python wrapper (noderag.search.lexical.sum_postings) checks dtypes once, this call the
// shapes and every ordinal (a damaged file raises ValueError, never writes out of bounds).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include "numpy_arrays.hpp"
#include <pybind11/stl.h>

#include <cstdint>
#include <algorithm>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace py = pybind11;

namespace {

using noderag::carray;

// The impacts ``weights`` summed per passage ordinal ``ords`` in the float64 scratch ``acc`` (n_pass
// entries, all zero), each posting added in the given order (the float sums of numpy's add.at); the
// touched ordinals are marked in the bitset ``marks`` (ceil(n_pass / 64) words, all zero) and read
// back by scanning its words, ascending: O(n_pass / 64 + postings), no sort. Both scratch arrays are
// all zero again on return. Returns (touched ordinals int64 ascending, their sums float64); with
// ``ids`` (int64, n_pass entries: the passages' node ids), ids[ordinal] in place of each ordinal (read
// here in ascending order as the bitset is scanned: a separate numpy gather cost more than this call).
template <typename W>
py::tuple sum_postings(carray<int32_t> ords, carray<W> weights, carray<double> acc, carray<uint64_t> marks,
                       std::optional<carray<int64_t>> ids) {
    if (ords.ndim() != 1 || weights.ndim() != 1 || acc.ndim() != 1 || marks.ndim() != 1 || (ids && ids->ndim() != 1))
        throw std::invalid_argument("sum_postings takes 1-D arrays");
    const int64_t m = ords.shape(0), n_pass = acc.shape(0);
    if (weights.shape(0) != m)
        throw std::invalid_argument("sum_postings: " + std::to_string(m) + " ordinals but " +
                                    std::to_string(weights.shape(0)) + " weights");
    if (marks.shape(0) != (n_pass + 63) / 64)
        throw std::invalid_argument("sum_postings: the bitset needs " + std::to_string((n_pass + 63) / 64) +
                                    " words for " + std::to_string(n_pass) + " passages, got " +
                                    std::to_string(marks.shape(0)));
    if (ids && ids->shape(0) != n_pass)
        throw std::invalid_argument("sum_postings: " + std::to_string(ids->shape(0)) + " ids for " +
                                    std::to_string(n_pass) + " passages");
    const int64_t* id = ids ? ids->data() : nullptr;
    const int32_t* od = ords.data();
    const W* wd = weights.data();
    double* ac = acc.mutable_data();
    uint64_t* mk = marks.mutable_data();
    int64_t n_touched = 0;
    bool ok = true;
    {
        py::gil_scoped_release release;
        const uint64_t bound = static_cast<uint64_t>(n_pass);
        for (int64_t i = 0; i < m; ++i)  // branch-free: negative ordinals wrap past the bound
            ok &= static_cast<uint64_t>(static_cast<uint32_t>(od[i])) < bound;
        if (ok) {
            for (int64_t i = 0; i < m; ++i) {
                const uint32_t o = static_cast<uint32_t>(od[i]);
                ac[o] += static_cast<double>(wd[i]);
                uint64_t& word = mk[o >> 6];
                const uint64_t bit = uint64_t{1} << (o & 63);
                n_touched += (word & bit) == 0;
                word |= bit;
            }
        }
    }
    if (!ok) {
        for (int64_t i = 0; i < m; ++i)
            if (od[i] < 0 || od[i] >= n_pass)
                throw std::invalid_argument("sum_postings: posting " + std::to_string(i) + " names passage ordinal " +
                                            std::to_string(od[i]) + ", outside [0, " + std::to_string(n_pass) +
                                            ") (damaged postings?)");
    }
    carray<int64_t> touched(static_cast<py::ssize_t>(n_touched));
    carray<double> scores(static_cast<py::ssize_t>(n_touched));
    int64_t* td = touched.mutable_data();
    double* sd = scores.mutable_data();
    {
        py::gil_scoped_release release;
        const int64_t n_words = marks.shape(0);
        int64_t k = 0;
        for (int64_t w = 0; w < n_words; ++w) {
            uint64_t word = mk[w];
            if (!word) continue;
            mk[w] = 0;
            do {
                const int64_t o = (w << 6) + __builtin_ctzll(word);
                td[k] = id ? id[o] : o;
                sd[k++] = ac[o];
                ac[o] = 0.0;
                word &= word - 1;
            } while (word);
        }
    }
    return py::make_tuple(touched, scores);
}

// The impacts of ``k`` posting runs summed per passage ordinal, each run ascending by ordinal
// (``bounds``: k + 1 offsets into ``ords`` / ``weights``). The runs are swept together one block of
// kBlock ordinals at a time into a small accumulator that stays in the L1/L2 cache, each run's
// postings of the block in run order: a passage's impacts are added in the order of the runs, the same
// float sums as ``sum_postings`` over the concatenated runs, without its scatter into one float64 entry a
// passage (megabytes, cold between queries). O(postings + k * blocks touched). A posting outside
// [0, n_pass) or a run out of order across blocks raises ValueError (never writes out of bounds).
// Returns (touched ordinals or ids[ordinal], int64 ascending; their sums, float64).
constexpr int64_t kBlock = 8192;

template <typename W>
py::tuple sum_runs(carray<int32_t> ords, carray<W> weights, carray<int64_t> bounds, int64_t n_pass,
                   std::optional<carray<int64_t>> ids) {
    if (ords.ndim() != 1 || weights.ndim() != 1 || bounds.ndim() != 1 || (ids && ids->ndim() != 1))
        throw std::invalid_argument("sum_runs takes 1-D arrays");
    const int64_t m = ords.shape(0), k = bounds.shape(0) - 1;
    if (weights.shape(0) != m)
        throw std::invalid_argument("sum_runs: " + std::to_string(m) + " ordinals but " +
                                    std::to_string(weights.shape(0)) + " weights");
    if (ids && ids->shape(0) != n_pass)
        throw std::invalid_argument("sum_runs: " + std::to_string(ids->shape(0)) + " ids for " +
                                    std::to_string(n_pass) + " passages");
    if (k < 0)
        throw std::invalid_argument("sum_runs: bounds needs at least one entry");
    const int64_t* bd = bounds.data();
    for (int64_t j = 0; j < k; ++j)
        if (bd[j] < 0 || bd[j] > bd[j + 1] || bd[j + 1] > m)
            throw std::invalid_argument("sum_runs: bounds must ascend within [0, " + std::to_string(m) + "], run " +
                                        std::to_string(j) + " is [" + std::to_string(bd[j]) + ", " +
                                        std::to_string(bd[j + 1]) + ")");
    const int64_t* id = ids ? ids->data() : nullptr;
    const int32_t* od = ords.data();
    const W* wd = weights.data();
    std::vector<int64_t> cur(bd, bd + k), touched;
    std::vector<double> sums, acc(kBlock, 0.0);
    std::vector<uint64_t> marks(kBlock / 64, 0);
    int64_t bad = -1;
    {
        py::gil_scoped_release release;
        touched.reserve(static_cast<size_t>(m));
        sums.reserve(static_cast<size_t>(m));
        while (bad < 0) {
            int64_t lo = n_pass;  // the lowest ordinal any run has left
            for (int64_t j = 0; j < k; ++j)
                if (cur[j] < bd[j + 1] && od[cur[j]] < lo) lo = od[cur[j]];
            if (lo >= n_pass) {  // every run done, or a run's next ordinal past the passages
                for (int64_t j = 0; j < k && bad < 0; ++j)
                    if (cur[j] < bd[j + 1]) bad = cur[j];
                break;
            }
            if (lo < 0) {
                for (int64_t j = 0; j < k && bad < 0; ++j)
                    if (cur[j] < bd[j + 1] && od[cur[j]] < 0) bad = cur[j];
                break;
            }
            const int64_t base = lo, hi = std::min(base + kBlock, n_pass);
            for (int64_t j = 0; j < k; ++j) {
                int64_t c = cur[j];
                const int64_t e = bd[j + 1];
                for (; c < e; ++c) {
                    const int64_t o = od[c];
                    if (o >= hi) break;
                    const uint64_t rel = static_cast<uint64_t>(o - base);
                    if (rel >= static_cast<uint64_t>(kBlock)) {  // below the block: the run descends
                        bad = c;
                        break;
                    }
                    acc[rel] += static_cast<double>(wd[c]);
                    marks[rel >> 6] |= uint64_t{1} << (rel & 63);
                }
                cur[j] = c;
                if (bad >= 0) break;
            }
            for (int64_t w = 0; w < kBlock / 64; ++w) {
                uint64_t word = marks[w];
                if (!word) continue;
                marks[w] = 0;
                do {
                    const int64_t rel = (w << 6) + __builtin_ctzll(word);
                    touched.push_back(id ? id[base + rel] : base + rel);
                    sums.push_back(acc[rel]);
                    acc[rel] = 0.0;
                    word &= word - 1;
                } while (word);
            }
        }
    }
    if (bad >= 0)
        throw std::invalid_argument("sum_runs: posting " + std::to_string(bad) + " names passage ordinal " +
                                    std::to_string(od[bad]) + ", outside [0, " + std::to_string(n_pass) +
                                    ") or below an earlier one of its run (runs must ascend)");
    carray<int64_t> out_ids(static_cast<py::ssize_t>(touched.size()));
    carray<double> out_sums(static_cast<py::ssize_t>(sums.size()));
    std::copy(touched.begin(), touched.end(), out_ids.mutable_data());
    std::copy(sums.begin(), sums.end(), out_sums.mutable_data());
    return py::make_tuple(out_ids, out_sums);
}

// The impact of each of ``k`` runs (run j: postings [starts[j], ends[j]), ``ords`` ascending) on each
// passage ordinal of ``targets``: float64 (k, t), 0 where the run lacks it; one binary search per
// (run, target). A query's per-term BM25 on a few candidates, read from the runs it summed.
template <typename W>
carray<double> run_impacts(carray<int32_t> ords, carray<W> weights, carray<int64_t> starts, carray<int64_t> ends,
                           carray<int32_t> targets) {
    if (ords.ndim() != 1 || weights.ndim() != 1 || starts.ndim() != 1 || ends.ndim() != 1 || targets.ndim() != 1)
        throw std::invalid_argument("run_impacts takes 1-D arrays");
    const int64_t m = ords.shape(0), k = starts.shape(0), t = targets.shape(0);
    if (weights.shape(0) != m || ends.shape(0) != k)
        throw std::invalid_argument("run_impacts: ords/weights and starts/ends must have equal lengths");
    const int64_t* sd = starts.data();
    const int64_t* ed = ends.data();
    for (int64_t j = 0; j < k; ++j)
        if (sd[j] < 0 || sd[j] > ed[j] || ed[j] > m)
            throw std::invalid_argument("run_impacts: run " + std::to_string(j) + " [" + std::to_string(sd[j]) + ", " +
                                        std::to_string(ed[j]) + ") is not within [0, " + std::to_string(m) + "]");
    carray<double> out({k, t});
    double* od = out.mutable_data();
    const int32_t* o = ords.data();
    const W* wd = weights.data();
    const int32_t* td = targets.data();
    {
        py::gil_scoped_release release;
        for (int64_t j = 0; j < k; ++j) {
            const int32_t* lo = o + sd[j];
            const int32_t* hi = o + ed[j];
            for (int64_t i = 0; i < t; ++i) {
                const int32_t* at = std::lower_bound(lo, hi, td[i]);
                od[j * t + i] = (at != hi && *at == td[i]) ? static_cast<double>(wd[at - o]) : 0.0;
            }
        }
    }
    return out;
}

}  // namespace

void register_lexical(py::module_& m) {
    // noconvert: a dtype mismatch is an error, never a silent copy of mapped impacts
    m.def("sum_postings", &sum_postings<float>, py::arg("ords").noconvert(), py::arg("weights").noconvert(),
          py::arg("acc").noconvert(), py::arg("marks").noconvert(), py::arg("ids").noconvert() = py::none(),
          "Impacts summed per passage ordinal in zeroed scratch (left zeroed): (touched ordinals int64 ascending, "
          "or their ids, sums float64).");
    m.def("sum_postings", &sum_postings<double>, py::arg("ords").noconvert(), py::arg("weights").noconvert(),
          py::arg("acc").noconvert(), py::arg("marks").noconvert(), py::arg("ids").noconvert() = py::none());
    m.def("sum_runs", &sum_runs<float>, py::arg("ords").noconvert(), py::arg("weights").noconvert(),
          py::arg("bounds").noconvert(), py::arg("n_pass"), py::arg("ids").noconvert() = py::none(),
          "Impacts of runs ascending by passage ordinal summed per ordinal, block by block: (touched ordinals int64 "
          "ascending, or their ids, sums float64).");
    m.def("sum_runs", &sum_runs<double>, py::arg("ords").noconvert(), py::arg("weights").noconvert(),
          py::arg("bounds").noconvert(), py::arg("n_pass"), py::arg("ids").noconvert() = py::none());
    m.def("run_impacts", &run_impacts<float>, py::arg("ords").noconvert(), py::arg("weights").noconvert(),
          py::arg("starts").noconvert(), py::arg("ends").noconvert(), py::arg("targets").noconvert(),
          "Impact of each run (ordinals ascending) on each target ordinal: float64 (runs, targets), 0 where absent.");
    m.def("run_impacts", &run_impacts<double>, py::arg("ords").noconvert(), py::arg("weights").noconvert(),
          py::arg("starts").noconvert(), py::arg("ends").noconvert(), py::arg("targets").noconvert());
}
