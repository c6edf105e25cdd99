// pybind11 binding of the shallow-PPR kernel: noderag._core.PPRKernel.
// Arrays must arrive C-contiguous with the exact dtypes (no implicit casts);
// the Python wrapper (noderag.graph.ppr) validates and converts them.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include "numpy_arrays.hpp"

#include <cmath>
#include <memory>
#include <stdexcept>
#include <vector>
#include <string>

#include "ppr.hpp"

namespace py = pybind11;

namespace {

using noderag::carray;

class PyPPRKernel {
  public:
    // indptr: C-contiguous int64 or int32 (the compact form of a mapped graph, used in place).
    PyPPRKernel(py::array indptr, carray<int32_t> indices, carray<float> weights, carray<uint8_t> types,
                bool check_edges)
        : indptr_(std::move(indptr)), indices_(std::move(indices)), weights_(std::move(weights)),
          types_(std::move(types)) {
        noderag::RowPtr ip;
        if (py::isinstance<carray<int64_t>>(indptr_))
            ip.p64 = static_cast<const int64_t*>(indptr_.data());
        else if (py::isinstance<carray<int32_t>>(indptr_))
            ip.p32 = static_cast<const int32_t*>(indptr_.data());
        else
            throw py::type_error("indptr must be a C-contiguous native-endian int64 or int32 array");
        if (indptr_.ndim() != 1 || indptr_.shape(0) < 1) throw std::invalid_argument("indptr must be 1-D of length n + 1 >= 1");
        const int64_t n = indptr_.shape(0) - 1;
        if (indices_.ndim() != 1 || weights_.ndim() != 1 || weights_.shape(0) != indices_.shape(0))
            throw std::invalid_argument("indices and weights must be 1-D of equal length");
        if (types_.ndim() != 1 || types_.shape(0) != n) throw std::invalid_argument("types must have shape (n,)");
        if (ip[n] != indices_.shape(0)) throw std::invalid_argument("indptr[n] must equal len(indices)");
        const int32_t* ix = indices_.data();
        const float* w = weights_.data();
        const uint8_t* ty = types_.data();
        py::gil_scoped_release release;
        kernel_ = std::make_unique<noderag::PPRKernel>(n, ip, ix, w, ty, check_edges);
    }

    int64_t n() const { return kernel_->n(); }
    int64_t nnz() const { return indices_.shape(0); }
    bool mirrored() const { return kernel_->mirrored(); }
    int64_t n_grouped() const { return kernel_->n_grouped(); }

    // One query with outputs allocated here: (ids (7, K) int32, scores (7, K) float32,
    // error bound, support size). Seeds: C-contiguous int32 or int64; weights: None
    // (uniform) or C-contiguous float32 or float64. Ranges and values are checked here.
    py::tuple query(py::array seeds, py::object weights, carray<int64_t> k_per_type, double alpha, int64_t iterations,
                    bool restart, double epsilon, double push_epsilon) {
        if (seeds.ndim() != 1 || seeds.shape(0) < 1) throw std::invalid_argument("seeds must be 1-D and non-empty");
        if (!(seeds.flags() & py::array::c_style)) throw std::invalid_argument("seeds must be C-contiguous");
        const int64_t ns = seeds.shape(0), n = kernel_->n();
        std::vector<int32_t> ids32(static_cast<size_t>(ns));
        auto take_ids = [&](auto* src) {
            for (int64_t i = 0; i < ns; ++i) {
                const int64_t v = static_cast<int64_t>(src[i]);
                if (v < 0 || v >= n)
                    throw std::invalid_argument("seeds must lie in [0, " + std::to_string(n) + "), found " +
                                                std::to_string(v));
                ids32[static_cast<size_t>(i)] = static_cast<int32_t>(v);
            }
        };
        if (py::isinstance<carray<int32_t>>(seeds))
            take_ids(static_cast<const int32_t*>(seeds.data()));
        else if (py::isinstance<carray<int64_t>>(seeds))
            take_ids(static_cast<const int64_t*>(seeds.data()));
        else
            throw std::invalid_argument("seeds must be native-endian int32 or int64");
        std::vector<float> w32(static_cast<size_t>(ns), 1.0f);
        if (!weights.is_none()) {
            py::array w = py::reinterpret_borrow<py::array>(weights);
            if (!py::isinstance<py::array>(weights) || w.ndim() != 1 || w.shape(0) != ns ||
                !(w.flags() & py::array::c_style))
                throw std::invalid_argument("seed_weights must be a C-contiguous array of the shape of seeds");
            double total = 0.0;
            auto take_w = [&](auto* src) {
                for (int64_t i = 0; i < ns; ++i) {
                    const double x = static_cast<double>(src[i]);
                    const float f = static_cast<float>(x);
                    if (!(x >= 0.0) || !std::isfinite(f))
                        throw std::invalid_argument("seed_weights must be finite float32 values >= 0, found " +
                                                    std::to_string(x));
                    w32[static_cast<size_t>(i)] = f;
                    total += f;
                }
            };
            if (py::isinstance<carray<float>>(w))
                take_w(static_cast<const float*>(w.data()));
            else if (py::isinstance<carray<double>>(w))
                take_w(static_cast<const double*>(w.data()));
            else
                throw std::invalid_argument("seed_weights must be native-endian float32 or float64");
            if (!(total > 0.0)) throw std::invalid_argument("seed_weights must not all be zero");
        }
        const noderag::PPRParams prm = make_params(k_per_type, alpha, iterations, restart, epsilon, push_epsilon);
        py::array_t<int32_t> ids({static_cast<py::ssize_t>(noderag::kNumTypes), static_cast<py::ssize_t>(prm.k_max)});
        py::array_t<float> scores({static_cast<py::ssize_t>(noderag::kNumTypes), static_cast<py::ssize_t>(prm.k_max)});
        int32_t* oi = ids.mutable_data();
        float* os = scores.mutable_data();
        double error = 0.0;
        int64_t support = 0;
        {
            py::gil_scoped_release release;
            auto sc = kernel_->acquire_scratch();
            kernel_->run_one(*sc, ids32.data(), w32.data(), ns, prm, oi, os, &error, &support);
            kernel_->release_scratch(std::move(sc));  // not returned to the pool if run_one threw
        }
        return py::make_tuple(ids, scores, error, support);
    }

    void run(carray<int32_t> seeds, carray<float> weights, carray<int64_t> offsets, carray<int64_t> k_per_type,
             double alpha, int64_t iterations, bool restart, double epsilon, double push_epsilon, int n_threads,
             py::array_t<int32_t, py::array::c_style> out_ids, py::array_t<float, py::array::c_style> out_scores,
             py::array_t<double, py::array::c_style> out_error, py::array_t<int64_t, py::array::c_style> out_support) {
        // Cheap guards: everything the kernel indexes with is checked here.
        if (seeds.ndim() != 1 || weights.ndim() != 1 || weights.shape(0) != seeds.shape(0))
            throw std::invalid_argument("seeds and weights must be 1-D of equal length");
        if (offsets.ndim() != 1 || offsets.shape(0) < 1) throw std::invalid_argument("offsets must be 1-D of length Q + 1");
        if (n_threads < 1) throw std::invalid_argument("n_threads must be >= 1");
        const int64_t Q = offsets.shape(0) - 1;
        const int64_t* off = offsets.data();
        const int64_t ns = seeds.shape(0);
        if (off[0] != 0 || off[Q] != ns) throw std::invalid_argument("offsets must start at 0 and end at len(seeds)");
        for (int64_t q = 0; q < Q; ++q)
            if (off[q + 1] < off[q]) throw std::invalid_argument("offsets must be non-decreasing");
        const int64_t n = kernel_->n();
        const int32_t* sd = seeds.data();
        const float* sw = weights.data();
        for (int64_t i = 0; i < ns; ++i) {
            if (sd[i] < 0 || sd[i] >= n) throw std::invalid_argument("seed ids must lie in [0, n)");
            if (!(sw[i] >= 0.0f) || !std::isfinite(sw[i])) throw std::invalid_argument("seed weights must be finite and >= 0");
        }
        for (int64_t q = 0; q < Q; ++q) {
            double s = 0.0;
            for (int64_t i = off[q]; i < off[q + 1]; ++i) s += sw[i];
            if (!(s > 0.0)) throw std::invalid_argument("every query's seed weights must sum to > 0");
        }
        const noderag::PPRParams prm = make_params(k_per_type, alpha, iterations, restart, epsilon, push_epsilon);
        if (out_ids.ndim() != 3 || out_ids.shape(0) != Q || out_ids.shape(1) != noderag::kNumTypes ||
            out_ids.shape(2) != prm.k_max)
            throw std::invalid_argument("out_ids must have shape (Q, 7, max(k_per_type))");
        if (out_scores.ndim() != 3 || out_scores.shape(0) != Q || out_scores.shape(1) != noderag::kNumTypes ||
            out_scores.shape(2) != prm.k_max)
            throw std::invalid_argument("out_scores must have shape (Q, 7, max(k_per_type))");
        if (out_error.ndim() != 1 || out_error.shape(0) != Q) throw std::invalid_argument("out_error must have shape (Q,)");
        if (out_support.ndim() != 1 || out_support.shape(0) != Q)
            throw std::invalid_argument("out_support must have shape (Q,)");
        int32_t* oi = out_ids.mutable_data();
        float* os = out_scores.mutable_data();
        double* oe = out_error.mutable_data();
        int64_t* osp = out_support.mutable_data();
        py::gil_scoped_release release;
        kernel_->run_batch(sd, sw, off, Q, prm, n_threads, oi, os, oe, osp);
    }

  private:
    noderag::PPRParams make_params(const carray<int64_t>& k_per_type, double alpha, int64_t iterations, bool restart,
                                   double epsilon, double push_epsilon) const {
        if (k_per_type.ndim() != 1 || k_per_type.shape(0) != noderag::kNumTypes)
            throw std::invalid_argument("k_per_type must have shape (7,)");
        if (!(alpha >= 0.0 && alpha <= 1.0)) throw std::invalid_argument("alpha must lie in [0, 1]");
        if (iterations < 0) throw std::invalid_argument("iterations must be >= 0");
        if (!(epsilon >= 0.0) || !std::isfinite(epsilon)) throw std::invalid_argument("epsilon must be finite and >= 0");
        if (!(push_epsilon >= 0.0) || !std::isfinite(push_epsilon))
            throw std::invalid_argument("push_epsilon must be finite and >= 0");
        noderag::PPRParams prm;
        prm.alpha = alpha;
        prm.iterations = iterations;
        prm.restart = restart;
        prm.epsilon = epsilon;
        prm.push_epsilon = push_epsilon;
        const int64_t* kp = k_per_type.data();
        for (int t = 0; t < noderag::kNumTypes; ++t) {
            if (kp[t] < 0) throw std::invalid_argument("k_per_type must be >= 0");
            prm.k_per_type[t] = std::min(kp[t], kernel_->n());  // no type has more than n nodes
            prm.k_max = std::max(prm.k_max, prm.k_per_type[t]);
        }
        return prm;
    }

    py::array indptr_;
    carray<int32_t> indices_;
    carray<float> weights_;
    carray<uint8_t> types_;
    std::unique_ptr<noderag::PPRKernel> kernel_;
};

}  // namespace

void register_ppr(py::module_& m) {
    py::class_<PyPPRKernel>(m, "PPRKernel",
                            "Shallow personalized PageRank over fixed CSR arrays (private; use noderag.graph.ppr).")
        .def(py::init<py::array, carray<int32_t>, carray<float>, carray<uint8_t>, bool>(),
             py::arg("indptr").noconvert(), py::arg("indices").noconvert(), py::arg("weights").noconvert(),
             py::arg("types").noconvert(), py::arg("check_edges") = true)
        .def_property_readonly("n", &PyPPRKernel::n)
        .def_property_readonly("nnz", &PyPPRKernel::nnz)
        .def_property_readonly("mirrored", &PyPPRKernel::mirrored,
                               "Whether the grouped (large) rows are mirrored, enabling the last-step correction.")
        .def_property_readonly("n_grouped", &PyPPRKernel::n_grouped,
                               "Number of rows kept grouped by neighbour type for the bounded-error mode.")
        .def_property_readonly_static("min_skip_segment", [](py::object) { return noderag::kMinSkipSegment; })
        .def("query", &PyPPRKernel::query, py::arg("seeds"), py::arg("weights").none(true),
             py::arg("k_per_type").noconvert(), py::arg("alpha"), py::arg("iterations"), py::arg("restart"),
             py::arg("epsilon"), py::arg("push_epsilon"),
             "Run one query; returns (ids (7, K) int32, scores (7, K) float32, error_bound, support_size).")
        .def("run", &PyPPRKernel::run, py::arg("seeds").noconvert(), py::arg("weights").noconvert(),
             py::arg("offsets").noconvert(), py::arg("k_per_type").noconvert(), py::arg("alpha"),
             py::arg("iterations"), py::arg("restart"), py::arg("epsilon"), py::arg("push_epsilon"),
             py::arg("n_threads"),
             py::arg("out_ids").noconvert(), py::arg("out_scores").noconvert(), py::arg("out_error").noconvert(),
             py::arg("out_support").noconvert(),
             "Run Q queries (seeds CSR-style by offsets) writing into the preallocated outputs; GIL released.");
}
