// The graph walks of the bridging round in one pass each: noderag._core.about_links and shared_links.
// From a query's best passages (``hop``) through the entities their units name, to the passages about
// one of those entities (about_links) and to the passages sharing a rare one (shared_links): what
// noderag.search.ranking.links did in some forty numpy calls a query. Arrays arrive C-contiguous with
// the exact dtypes; the Python wrapper (noderag.search.ranking.links) validates them once and gives the
// tables of powers and logarithms numpy computes, so every float is numpy's bit for bit. Each CSR row
// read is checked (bounds and column ids), so a damaged graph raises ValueError, never reads out of bounds.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include "numpy_arrays.hpp"

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace py = pybind11;

namespace {

using noderag::carray;
using noderag::to_array;

// The structural layer and the per-node columns the walks read.
template <typename Ptr>
struct Graph {
    const Ptr* ip;
    const int32_t* ix;
    const uint8_t* ty;
    const bool* act;
    const int64_t* chunk;
    int64_t n, nnz;

    // The active neighbours of ``node`` of type ``want``, in adjacency order, appended to ``out``;
    // false for a damaged row (offsets or column ids outside the graph).
    bool typed(int64_t node, uint8_t want, std::vector<int32_t>& out) const {
        const int64_t b = static_cast<int64_t>(ip[node]), e = static_cast<int64_t>(ip[node + 1]);
        if (b < 0 || b > e || e > nnz) return false;
        bool ok = true;
        for (int64_t j = b; j < e; ++j) ok &= static_cast<uint32_t>(ix[j]) < static_cast<uint32_t>(n);
        if (!ok) return false;
        for (int64_t j = b; j < e; ++j)
            if (ty[ix[j]] == want && act[ix[j]]) out.push_back(ix[j]);
        return true;
    }
};

template <typename Ptr>
Graph<Ptr> graph_of(const carray<Ptr>& indptr, const carray<int32_t>& indices, const carray<uint8_t>& types,
                    const carray<bool>& active, const carray<int64_t>& chunk) {
    const int64_t n = types.shape(0);
    if (indptr.ndim() != 1 || indptr.shape(0) != n + 1 || active.shape(0) != n || chunk.shape(0) != n)
        throw std::invalid_argument("indptr must have n + 1 entries and active and chunk n, for the n node types");
    return Graph<Ptr>{indptr.data(), indices.data(), types.data(), active.data(), chunk.data(), n, indices.shape(0)};
}

void check_ids(const int64_t* ids, int64_t m, int64_t n, const char* what) {
    for (int64_t i = 0; i < m; ++i)
        if (ids[i] < 0 || ids[i] >= n)
            throw py::index_error(std::string(what) + " must lie in [0, " + std::to_string(n) + "), got " +
                                  std::to_string(ids[i]));
}

bool in_hop(const std::vector<int64_t>& hop, int64_t c) { return std::find(hop.begin(), hop.end(), c) != hop.end(); }

[[noreturn]] void damaged(int64_t row) {
    throw std::invalid_argument("the graph's row " + std::to_string(row) + " is damaged (offsets or column ids)");
}

// The passages about each entity slot ``ents[i]`` (named by the source at position ``src[i]`` of ``hop``):
// the passages (not in ``hop``) of the entity's active units, for an entity with at most ``max_degree``
// of them; a passage is about it when at least ``about_share`` of its active units (at least 1) name
// it. Its strength: that share / split[m] (m: the passages about the slot's entity) * strength[src].
// Returns (ids, strengths): each passage once, in order of first reach (slots in order, passages
// ascending), with its largest strength (at least 0).
template <typename Ptr>
py::tuple about_links(carray<Ptr> indptr, carray<int32_t> indices, carray<uint8_t> types, carray<bool> active,
                      carray<int64_t> chunk, carray<int64_t> hop, carray<int64_t> src, carray<int64_t> ents,
                      carray<double> strength, carray<double> split, int64_t max_degree, double about_share) {
    const Graph<Ptr> g = graph_of(indptr, indices, types, active, chunk);
    const int64_t m = ents.shape(0);
    if (src.shape(0) != m) throw std::invalid_argument("about_links: src and ents differ in length");
    if (split.shape(0) <= max_degree) throw std::invalid_argument("about_links: split needs max_degree + 1 entries");
    check_ids(ents.data(), m, g.n, "entity ids");
    for (int64_t i = 0; i < m; ++i)
        if (src.data()[i] < 0 || src.data()[i] >= strength.shape(0))
            throw std::invalid_argument("about_links: a source position outside the strengths");
    const std::vector<int64_t> hops(hop.data(), hop.data() + hop.shape(0));
    const int64_t* sd = src.data();
    const int64_t* ed = ents.data();
    const double* st = strength.data();
    const double* sp = split.data();
    const uint8_t unit = 1;  // NodeType.S
    std::vector<int64_t> ids;
    std::vector<double> best;
    int64_t bad = -1;
    {
        py::gil_scoped_release release;
        std::unordered_map<int64_t, int64_t> at;      // passage -> its position in ids
        std::unordered_map<int64_t, double> units_of;  // passage -> its active units (at least 1)
        std::vector<int32_t> nb;
        std::vector<int64_t> reached;
        std::vector<std::pair<int64_t, double>> about;
        for (int64_t i = 0; i < m && bad < 0; ++i) {
            nb.clear();
            if (!g.typed(ed[i], unit, nb)) { bad = ed[i]; break; }
            if (static_cast<int64_t>(nb.size()) > max_degree) continue;  // a hub does not bridge
            reached.clear();
            for (int32_t u : nb) {
                const int64_t c = g.chunk[u];
                if (c >= 0 && !in_hop(hops, c)) reached.push_back(c);
            }
            std::sort(reached.begin(), reached.end());
            about.clear();
            for (size_t a = 0; a < reached.size();) {
                size_t b = a;
                while (b < reached.size() && reached[b] == reached[a]) ++b;
                const int64_t c = reached[a];
                auto known = units_of.find(c);
                double count;
                if (known != units_of.end()) {
                    count = known->second;
                } else {
                    if (c >= g.n) { bad = c; break; }
                    std::vector<int32_t> its;
                    if (!g.typed(c, unit, its)) { bad = c; break; }
                    count = static_cast<double>(std::max<size_t>(its.size(), 1));
                    units_of.emplace(c, count);
                }
                const double share = static_cast<double>(b - a) / count;
                if (share >= about_share) about.emplace_back(c, share);
                a = b;
            }
            if (bad >= 0) break;
            const double div = sp[about.size()];
            for (const auto& [c, share] : about) {
                const double v = share / div * st[sd[i]];
                auto found = at.find(c);
                if (found == at.end()) {
                    at.emplace(c, static_cast<int64_t>(ids.size()));
                    ids.push_back(c);
                    best.push_back(std::max(v, 0.0));
                } else {
                    best[found->second] = std::max(best[found->second], v);
                }
            }
        }
    }
    if (bad >= 0) damaged(bad);
    return py::make_tuple(to_array(ids), to_array(best));
}

// The passages sharing an entity with each source: ``src``/``ents`` are one entry per unit naming an
// entity (by source, in walk order); entries whose entity is in ``excluded`` (sorted) or has a
// structural degree above ``max_degree`` are dropped, then all but the first ``max_entities`` of each
// source. Each remaining entry's active units lead to their passages (not in ``hop``), each passage
// gaining weight[degree] per such unit, summed in entry order. Per source its passages ascending, or, past
// ``max_shared`` of them, the ``max_shared`` strongest (ties to the lower id) strongest first.
// Returns (source positions, passage ids, strengths), source by source.
template <typename Ptr>
py::tuple shared_links(carray<Ptr> indptr, carray<int32_t> indices, carray<uint8_t> types, carray<bool> active,
                       carray<int64_t> chunk, carray<int64_t> hop, carray<int64_t> src, carray<int64_t> ents,
                       carray<int64_t> excluded, carray<double> weight, int64_t max_degree, int64_t max_entities,
                       int64_t max_shared) {
    const Graph<Ptr> g = graph_of(indptr, indices, types, active, chunk);
    const int64_t m = ents.shape(0);
    if (src.shape(0) != m) throw std::invalid_argument("shared_links: src and ents differ in length");
    if (weight.shape(0) <= max_degree) throw std::invalid_argument("shared_links: weight needs max_degree + 1 entries");
    check_ids(ents.data(), m, g.n, "entity ids");
    const std::vector<int64_t> hops(hop.data(), hop.data() + hop.shape(0));
    const int64_t* sd = src.data();
    const int64_t* ed = ents.data();
    const int64_t* xd = excluded.data();
    const int64_t nx = excluded.shape(0);
    const double* wt = weight.data();
    const uint8_t unit = 1;  // NodeType.S
    std::vector<int64_t> out_src, out_ids;
    std::vector<double> out_st;
    int64_t bad = -1;
    {
        py::gil_scoped_release release;
        std::vector<int32_t> nb;
        for (int64_t a = 0; a < m && bad < 0;) {  // one source's block of entries at a time
            int64_t b = a;
            while (b < m && sd[b] == sd[a]) ++b;
            std::unordered_map<int64_t, double> sum;  // passage -> its strength, added in entry order
            std::vector<int64_t> order;
            int64_t kept = 0;
            for (int64_t j = a; j < b && kept < max_entities; ++j) {
                const int64_t e = ed[j];
                if (std::binary_search(xd, xd + nx, e)) continue;
                const int64_t deg = static_cast<int64_t>(g.ip[e + 1]) - static_cast<int64_t>(g.ip[e]);
                if (deg > max_degree) continue;
                ++kept;
                nb.clear();
                if (!g.typed(e, unit, nb)) { bad = e; break; }
                for (int32_t u : nb) {
                    const int64_t c = g.chunk[u];
                    if (c < 0 || in_hop(hops, c)) continue;
                    auto [it, fresh] = sum.try_emplace(c, 0.0);
                    if (fresh) order.push_back(c);
                    it->second += wt[deg < 0 ? 0 : deg];
                }
            }
            std::sort(order.begin(), order.end());
            if (static_cast<int64_t>(order.size()) > max_shared) {
                std::stable_sort(order.begin(), order.end(),
                                 [&](int64_t x, int64_t y) { return sum[x] > sum[y]; });
                order.resize(static_cast<size_t>(max_shared));
            }
            for (int64_t c : order) {
                out_src.push_back(sd[a]);
                out_ids.push_back(c);
                out_st.push_back(sum[c]);
            }
            a = b;
        }
    }
    if (bad >= 0) damaged(bad);
    return py::make_tuple(to_array(out_src), to_array(out_ids), to_array(out_st));
}

}  // namespace

void register_bridge_links(py::module_& m) {
    // noconvert: a dtype mismatch is an error, never a silent copy of a memory-mapped array
    m.def("about_links", &about_links<int64_t>, py::arg("indptr").noconvert(), py::arg("indices").noconvert(),
          py::arg("types").noconvert(), py::arg("active").noconvert(), py::arg("chunk").noconvert(),
          py::arg("hop").noconvert(), py::arg("src").noconvert(), py::arg("ents").noconvert(),
          py::arg("strength").noconvert(), py::arg("split").noconvert(), py::arg("max_degree"), py::arg("about_share"),
          "Passages about the entities the sources name: (ids int64 in order of first reach, strengths float64).");
    m.def("about_links", &about_links<int32_t>, py::arg("indptr").noconvert(), py::arg("indices").noconvert(),
          py::arg("types").noconvert(), py::arg("active").noconvert(), py::arg("chunk").noconvert(),
          py::arg("hop").noconvert(), py::arg("src").noconvert(), py::arg("ents").noconvert(),
          py::arg("strength").noconvert(), py::arg("split").noconvert(), py::arg("max_degree"), py::arg("about_share"));
    m.def("shared_links", &shared_links<int64_t>, py::arg("indptr").noconvert(), py::arg("indices").noconvert(),
          py::arg("types").noconvert(), py::arg("active").noconvert(), py::arg("chunk").noconvert(),
          py::arg("hop").noconvert(), py::arg("src").noconvert(), py::arg("ents").noconvert(),
          py::arg("excluded").noconvert(), py::arg("weight").noconvert(), py::arg("max_degree"),
          py::arg("max_entities"), py::arg("max_shared"),
          "Passages sharing a rare entity with each source: (source positions, ids, strengths).");
    m.def("shared_links", &shared_links<int32_t>, py::arg("indptr").noconvert(), py::arg("indices").noconvert(),
          py::arg("types").noconvert(), py::arg("active").noconvert(), py::arg("chunk").noconvert(),
          py::arg("hop").noconvert(), py::arg("src").noconvert(), py::arg("ents").noconvert(),
          py::arg("excluded").noconvert(), py::arg("weight").noconvert(), py::arg("max_degree"),
          py::arg("max_entities"), py::arg("max_shared"));
}
