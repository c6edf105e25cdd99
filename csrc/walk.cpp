// Typed neighbour gathers of the query-time graph walks: noderag._core.typed_neighbours.
// Arrays arrive C-contiguous with the exact dtypes (no implicit casts, so a memory-mapped CSR is
// never copied); the Python wrapper (noderag.graph.walk) validates them once, this call the node ids.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

namespace py = pybind11;

namespace {

template <typename T>
using carray = py::array_t<T, py::array::c_style>;

template <typename T>
carray<T> to_array(const std::vector<T>& v) {
    carray<T> out(static_cast<py::ssize_t>(v.size()));
    std::copy(v.begin(), v.end(), out.mutable_data());
    return out;
}

// The active neighbours of type ``node_type`` of each of ``nodes``: (position in ``nodes`` of each
// neighbour's owner, neighbour id), grouped by owner in adjacency order.
py::tuple typed_neighbours(carray<int64_t> indptr, carray<int32_t> indices, carray<uint8_t> types,
                           carray<bool> active, carray<int64_t> nodes, int64_t node_type) {
    const int64_t* ip = indptr.data();
    const int32_t* ix = indices.data();
    const uint8_t* ty = types.data();
    const bool* act = active.data();
    const int64_t* nd = nodes.data();
    const int64_t m = nodes.shape(0);
    const uint8_t want = static_cast<uint8_t>(node_type);
    const int64_t n = types.shape(0);
    for (int64_t i = 0; i < m; ++i)  // the one check only this call can make cheaply
        if (nd[i] < 0 || nd[i] >= n)
            throw py::index_error("node ids must lie in [0, " + std::to_string(n) + "), got " + std::to_string(nd[i]));
    std::vector<int64_t> owner, nb;
    {
        py::gil_scoped_release release;
        for (int64_t i = 0; i < m; ++i) {
            for (int64_t j = ip[nd[i]], end = ip[nd[i] + 1]; j < end; ++j) {
                const int32_t u = ix[j];
                if (ty[u] == want && act[u]) {
                    owner.push_back(i);
                    nb.push_back(u);
                }
            }
        }
    }
    return py::make_tuple(to_array(owner), to_array(nb));
}

}  // namespace

void register_walk(py::module_& m) {
    // noconvert: a dtype mismatch is an error, never a silent copy of a memory-mapped array
    m.def("typed_neighbours", &typed_neighbours, py::arg("indptr").noconvert(), py::arg("indices").noconvert(),
          py::arg("types").noconvert(), py::arg("active").noconvert(), py::arg("nodes").noconvert(),
          py::arg("node_type"),
          "Active neighbours of one type of some nodes: (owner positions int64, neighbour ids int64).");
}
