// BM25 posting sums of a query: noderag._core.sum_postings.
// Arrays arrive C-contiguous with the exact dtypes (no implicit casts, so mapped impacts are never
// copied); the Python wrapper (noderag.search.lexical.sum_postings) checks dtypes once, this call the
// shapes and every ordinal (a damaged file raises ValueError, never writes out of bounds).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>

namespace py = pybind11;

namespace {

template <typename T>
using carray = py::array_t<T, py::array::c_style>;

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

}  // namespace

void register_lexical(py::module_& m) {
    // noconvert: a dtype mismatch is an error, never a silent copy of mapped impacts
    m.def("sum_postings", &sum_postings<float>, py::arg("ords").noconvert(), py::arg("weights").noconvert(),
          py::arg("acc").noconvert(), py::arg("marks").noconvert(), py::arg("ids").noconvert() = py::none(),
          "Impacts summed per passage ordinal in zeroed scratch (left zeroed): (touched ordinals int64 ascending, "
          "or their ids, sums float64).");
    m.def("sum_postings", &sum_postings<double>, py::arg("ords").noconvert(), py::arg("weights").noconvert(),
          py::arg("acc").noconvert(), py::arg("marks").noconvert(), py::arg("ids").noconvert() = py::none());
}
