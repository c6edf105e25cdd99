// Typed neighbour gathers of the query-time graph walks: noderag._core.typed_neighbours.
// Arrays arrive C-contiguous with the exact dtypes (no implicit casts, so a memory-mapped CSR is
// never copied); the Python wrapper (noderag.graph.walk) validates them once, this call the node ids.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include "numpy_arrays.hpp"

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace py = pybind11;

namespace {

using noderag::carray;
using noderag::to_array;

// The active neighbours of type ``node_type`` of each of ``nodes``: (position in ``nodes`` of each
// neighbour's owner, neighbour id), grouped by owner in adjacency order. Every row read is checked
// (its bounds and column ids: O(its length), branch-free), so a damaged CSR raises ValueError and
// is never read out of bounds. ``indptr`` is int64 or int32 (a graph's compact on-disk form, used
// as mapped).
template <typename Ptr>
py::tuple typed_neighbours(carray<Ptr> indptr, carray<int32_t> indices, carray<uint8_t> types,
                           carray<bool> active, carray<int64_t> nodes, int64_t node_type) {
    const Ptr* ip = indptr.data();
    const int32_t* ix = indices.data();
    const uint8_t* ty = types.data();
    const bool* act = active.data();
    const int64_t* nd = nodes.data();
    const int64_t m = nodes.shape(0);
    const uint8_t want = static_cast<uint8_t>(node_type);
    const int64_t n = types.shape(0), nnz = indices.shape(0);
    if (indptr.ndim() != 1 || indptr.shape(0) != n + 1 || active.shape(0) != n)
        throw std::invalid_argument("indptr must have n + 1 entries and active n, for the n node types");
    for (int64_t i = 0; i < m; ++i)  // the one check only this call can make cheaply
        if (nd[i] < 0 || nd[i] >= n)
            throw py::index_error("node ids must lie in [0, " + std::to_string(n) + "), got " + std::to_string(nd[i]));
    std::vector<int64_t> owner, nb;
    bool ok = true;
    int64_t bad = -1;
    {
        py::gil_scoped_release release;
        for (int64_t i = 0; i < m && ok; ++i) {
            const int64_t b = static_cast<int64_t>(ip[nd[i]]), e = static_cast<int64_t>(ip[nd[i] + 1]);
            if (b < 0 || b > e || e > nnz) {
                ok = false;
                bad = nd[i];
                break;
            }
            bool ids_ok = true;
            for (int64_t j = b; j < e; ++j) ids_ok &= static_cast<uint32_t>(ix[j]) < static_cast<uint32_t>(n);
            if (!ids_ok) {
                ok = false;
                bad = nd[i];
                break;
            }
            for (int64_t j = b; j < e; ++j) {
                const int32_t u = ix[j];
                if (ty[u] == want && act[u]) {
                    owner.push_back(i);
                    nb.push_back(u);
                }
            }
        }
    }
    if (!ok) throw std::invalid_argument("the graph's row " + std::to_string(bad) + " is damaged (offsets or column ids)");
    return py::make_tuple(to_array(owner), to_array(nb));
}

}  // namespace

void register_walk(py::module_& m) {
    // noconvert: a dtype mismatch is an error, never a silent copy of a memory-mapped array
    m.def("typed_neighbours", &typed_neighbours<int64_t>, py::arg("indptr").noconvert(), py::arg("indices").noconvert(),
          py::arg("types").noconvert(), py::arg("active").noconvert(), py::arg("nodes").noconvert(),
          py::arg("node_type"),
          "Active neighbours of one type of some nodes: (owner positions int64, neighbour ids int64).");
    m.def("typed_neighbours", &typed_neighbours<int32_t>, py::arg("indptr").noconvert(), py::arg("indices").noconvert(),
          py::arg("types").noconvert(), py::arg("active").noconvert(), py::arg("nodes").noconvert(),
          py::arg("node_type"));
}
