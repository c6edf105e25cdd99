// The numpy arrays the native boundary takes and returns: C-contiguous, exact dtype (no implicit casts).
#pragma once

#include <pybind11/numpy.h>

#include <algorithm>
#include <vector>

namespace noderag {

template <typename T>
using carray = pybind11::array_t<T, pybind11::array::c_style>;

// A new 1-D array holding ``v``.
template <typename T>
carray<T> to_array(const std::vector<T>& v) {
    carray<T> out(static_cast<pybind11::ssize_t>(v.size()));
    std::copy(v.begin(), v.end(), out.mutable_data());
    return out;
}

}  // namespace noderag
