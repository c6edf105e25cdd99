// The title heads a text may name: noderag._core.title_candidates.
// Arrays arrive C-contiguous with the exact dtypes; the Python wrapper
// (noderag.search.titles.TitleLinks.named_groups) checks them once.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include "numpy_arrays.hpp"

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <vector>

namespace py = pybind11;

namespace {

using noderag::carray;

// Per token that may start a head (``can_start``), longest first: every length n (a bit of its first token's
// mask in ``first_mask``, at most ``max_tokens``, inside the text) whose head hash (h = h * q + token hash over
// the n tokens, mod 2**64) is in the sorted ``heads``, with the range [lo, hi) of rows that bear it. Returns
// (starts, lengths, lo, hi), int64, by start then length descending; the caller verifies each against the
// title itself (a hash proposes, the title decides).
py::tuple title_candidates(carray<uint64_t> hashes, carray<bool> can_start, carray<uint64_t> first,
                           carray<int64_t> first_mask, carray<uint64_t> heads, int64_t max_tokens, uint64_t q) {
    const int64_t n = hashes.shape(0);
    if (can_start.shape(0) != n || first_mask.shape(0) != first.shape(0))
        throw std::invalid_argument("title_candidates: hashes and can_start (n,), first and first_mask (m,) expected");
    const uint64_t* hs = hashes.data();
    const bool* ok = can_start.data();
    const uint64_t* fb = first.data();
    const uint64_t* fe = fb + first.shape(0);
    const int64_t* fm = first_mask.data();
    const uint64_t* hb = heads.data();
    const uint64_t* he = hb + heads.shape(0);
    std::vector<int64_t> starts, lengths, lo, hi;
    {
        py::gil_scoped_release release;
        std::vector<uint64_t> prefix(static_cast<size_t>(std::max<int64_t>(max_tokens, 1)) + 1);
        for (int64_t s = 0; s < n; ++s) {
            if (!ok[s]) continue;
            const uint64_t* at = std::lower_bound(fb, fe, hs[s]);
            if (at == fe || *at != hs[s]) continue;
            const int64_t mask = fm[at - fb];
            const int64_t longest = std::min(max_tokens, n - s);
            uint64_t h = 0;
            for (int64_t k = 1; k <= longest; ++k) {
                h = h * q + hs[s + k - 1];  // unsigned: wraps mod 2**64
                prefix[static_cast<size_t>(k)] = h;
            }
            for (int64_t k = longest; k >= 1; --k) {
                if (!((mask >> k) & 1)) continue;
                const uint64_t key = prefix[static_cast<size_t>(k)];
                const uint64_t* a = std::lower_bound(hb, he, key);
                if (a == he || *a != key) continue;
                starts.push_back(s);
                lengths.push_back(k);
                lo.push_back(a - hb);
                hi.push_back(std::upper_bound(a, he, key) - hb);
            }
        }
    }
    auto out = [](const std::vector<int64_t>& v) {
        carray<int64_t> arr(static_cast<py::ssize_t>(v.size()));
        std::copy(v.begin(), v.end(), arr.mutable_data());
        return arr;
    };
    return py::make_tuple(out(starts), out(lengths), out(lo), out(hi));
}

}  // namespace

void register_title_heads(py::module_& m) {
    m.def("title_candidates", &title_candidates, py::arg("hashes").noconvert(), py::arg("can_start").noconvert(),
          py::arg("first").noconvert(), py::arg("first_mask").noconvert(), py::arg("heads").noconvert(),
          py::arg("max_tokens"), py::arg("q"),
          "Title heads a text's tokens may start: (starts, lengths, lo, hi) int64, by start, longest first.");
}
