// The greedy order of ranked passages without redundancy: noderag._core.redundancy_order.
// Arrays arrive C-contiguous with the exact dtypes; the Python wrapper
// (noderag.search.redundancy.redundancy_order) checks dtypes and shapes once.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include "numpy_arrays.hpp"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <numeric>
#include <stdexcept>
#include <vector>

namespace py = pybind11;

namespace {

using noderag::carray;

// At each of the first ``top`` positions the passage of highest current score wins (the first of equal
// ones), where a passage is redundant, scored ``scores - credit``, when every term it matches
// (``matched``: terms x n) is matched by a passage already placed and its cosine is no higher than theirs;
// the rest follow by their current scores (stable). Returns (positions, their scores).
py::tuple redundancy_order(carray<double> scores, carray<double> credit, carray<bool> matched, carray<double> cosines,
                           int64_t top) {
    const int64_t n = scores.shape(0);
    if (credit.shape(0) != n || cosines.shape(0) != n || matched.ndim() != 2 || matched.shape(1) != n)
        throw std::invalid_argument("redundancy_order: scores, credit, cosines (n,) and matched (terms, n) expected");
    const int64_t terms = matched.shape(0);
    const double* sc = scores.data();
    const double* cr = credit.data();
    const double* co = cosines.data();
    const bool* mt = matched.data();
    carray<int64_t> order(n);
    carray<double> out(n);
    int64_t* od = order.mutable_data();
    double* vd = out.mutable_data();
    {
        py::gil_scoped_release release;
        std::vector<char> covered(static_cast<size_t>(terms), 0), left(static_cast<size_t>(n), 1);
        std::vector<double> value(static_cast<size_t>(n));
        double best_cos = -std::numeric_limits<double>::infinity();
        auto current = [&](int64_t i) {
            bool fresh = false;
            for (int64_t t = 0; t < terms && !fresh; ++t) fresh = mt[t * n + i] && !covered[t];
            return (!fresh && co[i] <= best_cos) ? sc[i] - cr[i] : sc[i];
        };
        const int64_t steps = std::min(std::max<int64_t>(top, 0), n);
        int64_t k = 0;
        for (; k < steps; ++k) {
            int64_t pick = -1;
            double best = -std::numeric_limits<double>::infinity();
            for (int64_t i = 0; i < n; ++i) {
                if (!left[i]) continue;
                const double v = current(i);
                if (pick < 0 || v > best) {
                    pick = i;
                    best = v;
                }
            }
            od[k] = pick;
            vd[k] = best;
            left[pick] = 0;
            for (int64_t t = 0; t < terms; ++t) covered[t] |= mt[t * n + pick];
            best_cos = std::max(best_cos, co[pick]);
        }
        std::vector<int64_t> rest;
        for (int64_t i = 0; i < n; ++i)
            if (left[i]) {
                rest.push_back(i);
                value[i] = current(i);
            }
        std::stable_sort(rest.begin(), rest.end(), [&](int64_t a, int64_t b) { return value[a] > value[b]; });
        for (int64_t i : rest) {
            od[k] = i;
            vd[k++] = value[i];
        }
    }
    return py::make_tuple(order, out);
}

}  // namespace

void register_redundancy(py::module_& m) {
    m.def("redundancy_order", &redundancy_order, py::arg("scores").noconvert(), py::arg("credit").noconvert(),
          py::arg("matched").noconvert(), py::arg("cosines").noconvert(), py::arg("top"),
          "Greedy order of ranked passages without redundancy: (positions int64, their scores float64).");
}
