// pybind11 module noderag._core: the narrow native boundary.
// Each kernel file registers its functions through a register_* hook.
#include <pybind11/pybind11.h>

namespace py = pybind11;

void register_ppr(py::module_& m);   // ppr_bindings.cpp
void register_walk(py::module_& m);  // walk.cpp
void register_lexical(py::module_& m);  // lexical.cpp
void register_line_words(py::module_& m);  // line_words.cpp
void register_bridge_links(py::module_& m);  // bridge_links.cpp
void register_redundancy(py::module_& m);  // redundancy.cpp
void register_title_heads(py::module_& m);  // title_heads.cpp

#define STRINGIFY(x) #x
#define MACRO_STRINGIFY(x) STRINGIFY(x)

PYBIND11_MODULE(_core, m) {
    m.doc() = "noderag native kernels (private; use the noderag.graph wrappers)";
#ifdef VERSION_INFO
    m.attr("__version__") = MACRO_STRINGIFY(VERSION_INFO);
#else
    m.attr("__version__") = "dev";
#endif
    register_ppr(m);
    register_walk(m);
    register_lexical(m);
    register_line_words(m);
    register_bridge_links(m);
    register_redundancy(m);
    register_title_heads(m);
}
