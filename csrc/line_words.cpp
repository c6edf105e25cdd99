// Context-line token counts from cached per-word counts: noderag._core.LineWords (noderag.tokenize.LineCounter).
// A span of UTF-8 bytes is split into words as Python's str.split() splits its text (runs of anything but the
// 29 Unicode whitespace characters; the bytes are valid UTF-8, so a whitespace sequence can only start at a
// lead byte and a byte-wise scan finds them), a span of only zero bytes (an erased text) has none. The line's
// tokens are the sum of its words' cached counts plus its last word's line-break difference; the counts are
// made in Python (tiktoken) for the words this cache lacks (missing()) and handed back (add()).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include "numpy_arrays.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace py = pybind11;

namespace {

using noderag::carray;

// Bytes of the whitespace character starting at p (0: none), q the span's end.
inline int space_len(const uint8_t* p, const uint8_t* q) {
    const uint8_t c = p[0];
    if (c < 0x80) return (c == 0x20 || (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x1f)) ? 1 : 0;
    const int64_t left = q - p;
    if (c == 0xc2) return (left >= 2 && (p[1] == 0x85 || p[1] == 0xa0)) ? 2 : 0;
    if (left < 3) return 0;
    if (c == 0xe1) return (p[1] == 0x9a && p[2] == 0x80) ? 3 : 0;
    if (c == 0xe2) {
        if (p[1] == 0x80)
            return ((p[2] >= 0x80 && p[2] <= 0x8a) || p[2] == 0xa8 || p[2] == 0xa9 || p[2] == 0xaf) ? 3 : 0;
        return (p[1] == 0x81 && p[2] == 0x9f) ? 3 : 0;
    }
    if (c == 0xe3) return (p[1] == 0x80 && p[2] == 0x80) ? 3 : 0;
    return 0;
}

// Calls word(view, is_last) for each word of blob[lo, hi); returns the word count.
template <typename F>
int64_t each_word(const uint8_t* blob, int64_t lo, int64_t hi, F&& word) {
    const uint8_t* p = blob + lo;
    const uint8_t* q = blob + hi;
    if (hi > lo) {
        bool zeros = true;
        for (const uint8_t* r = p; r < q; ++r)
            if (*r) { zeros = false; break; }
        if (zeros) return 0;  // erased
    }
    int64_t n = 0;
    const uint8_t* start = nullptr;
    std::string_view prev;
    bool have = false;
    while (p < q) {
        const int s = space_len(p, q);
        if (s) {
            if (start) {
                if (have) word(prev, false);
                prev = std::string_view(reinterpret_cast<const char*>(start), p - start);
                have = true;
                ++n;
                start = nullptr;
            }
            p += s;
        } else {
            if (!start) start = p;
            ++p;
        }
    }
    if (start) {
        if (have) word(prev, false);
        prev = std::string_view(reinterpret_cast<const char*>(start), q - start);
        have = true;
        ++n;
    }
    if (have) word(prev, true);
    return n;
}

class LineWords {
public:
    explicit LineWords(int64_t max_cached) : max_cached_(max_cached) {
        const size_t room = static_cast<size_t>(std::min<int64_t>(std::max<int64_t>(max_cached, 0), int64_t{1} << 22));
        word_.reserve(room);  // no rehash while the cache fills
        brk_.reserve(room / 2);
    }

    // (distinct words without a cached count, distinct last words without a cached break), as bytes, in
    // order of first sight; empties both caches first when they hold more than max_cached words.
    py::tuple missing(carray<uint8_t> blob, carray<int64_t> offsets) {
        check(blob, offsets);
        if (static_cast<int64_t>(word_.size()) > max_cached_) {
            word_.clear();
            brk_.clear();
            arena_.clear();
        }
        std::vector<std::string_view> new_words, new_last;
        {
            std::unordered_set<std::string_view> seen_w, seen_l;
            const uint8_t* b = blob.data();
            const int64_t* o = offsets.data();
            py::gil_scoped_release release;
            for (int64_t i = 0; i + 1 < offsets.shape(0); ++i)
                each_word(b, o[i], o[i + 1], [&](std::string_view w, bool last) {
                    if (!word_.count(w) && seen_w.insert(w).second) new_words.push_back(w);
                    if (last && !brk_.count(w) && seen_l.insert(w).second) new_last.push_back(w);
                });
        }
        return py::make_tuple(as_list(new_words), as_list(new_last));
    }

    // Cache words' counts and last words' break differences (bytes keys, ints).
    void add(const py::list& words, const py::list& counts, const py::list& last, const py::list& breaks) {
        if (words.size() != counts.size() || last.size() != breaks.size())
            throw std::invalid_argument("LineWords.add: keys and counts differ in length");
        for (size_t i = 0; i < words.size(); ++i) word_[keep(words[i])] = counts[i].cast<int64_t>();
        for (size_t i = 0; i < last.size(); ++i) brk_[keep(last[i])] = breaks[i].cast<int64_t>();
    }

    // (tokens of each span's line from the cached counts, int64; its word count, int64); every word and last
    // word must be cached (missing() then add()).
    py::tuple count(carray<uint8_t> blob, carray<int64_t> offsets) {
        check(blob, offsets);
        const int64_t n = offsets.shape(0) - 1;
        carray<int64_t> out(n), lengths(n);
        int64_t* od = out.mutable_data();
        int64_t* ld = lengths.mutable_data();
        const uint8_t* b = blob.data();
        const int64_t* o = offsets.data();
        bool ok = true;
        {
            py::gil_scoped_release release;
            for (int64_t i = 0; i < n; ++i) {
                int64_t sum = 0;
                ld[i] = each_word(b, o[i], o[i + 1], [&](std::string_view w, bool last) {
                    auto it = word_.find(w);
                    if (it == word_.end()) { ok = false; return; }
                    sum += it->second;
                    if (last) {
                        auto jt = brk_.find(w);
                        if (jt == brk_.end()) { ok = false; return; }
                        sum += jt->second;
                    }
                });
                od[i] = sum;
            }
        }
        if (!ok) throw std::runtime_error("LineWords.count: a word without a cached count (call missing() and add())");
        return py::make_tuple(out, lengths);
    }

    // The cached counts of some words (bytes; each must be cached), as a list of ints.
    py::list spaced(const py::list& words) const {
        py::list out(words.size());
        for (size_t i = 0; i < words.size(); ++i) {
            auto it = word_.find(words[i].cast<std::string_view>());
            if (it == word_.end()) throw std::invalid_argument("LineWords.spaced: a word without a cached count");
            out[i] = it->second;
        }
        return out;
    }

    int64_t size() const { return static_cast<int64_t>(word_.size()); }

private:
    static void check(const carray<uint8_t>& blob, const carray<int64_t>& offsets) {
        if (blob.ndim() != 1 || offsets.ndim() != 1 || offsets.shape(0) < 1)
            throw std::invalid_argument("LineWords: a 1-D byte blob and at least one offset");
        const int64_t* o = offsets.data();
        const int64_t m = offsets.shape(0);
        for (int64_t i = 0; i < m; ++i)
            if (o[i] < 0 || o[i] > blob.shape(0) || (i && o[i] < o[i - 1]))
                throw std::invalid_argument("LineWords: offsets must rise within the blob's " +
                                            std::to_string(blob.shape(0)) + " bytes");
    }

    static py::list as_list(const std::vector<std::string_view>& views) {
        py::list out(views.size());
        for (size_t i = 0; i < views.size(); ++i) out[i] = py::bytes(views[i].data(), views[i].size());
        return out;
    }

    std::string_view keep(const py::handle& key) {  // the key's bytes copied into the arena (stable address)
        std::string_view v = key.cast<std::string_view>();
        auto it = word_.find(v);
        if (it != word_.end()) return it->first;
        auto jt = brk_.find(v);
        if (jt != brk_.end()) return jt->first;
        arena_.push_back(std::make_unique<char[]>(v.size() ? v.size() : 1));
        std::memcpy(arena_.back().get(), v.data(), v.size());
        return std::string_view(arena_.back().get(), v.size());
    }

    int64_t max_cached_;
    std::vector<std::unique_ptr<char[]>> arena_;
    std::unordered_map<std::string_view, int64_t> word_, brk_;
};

}  // namespace

void register_line_words(py::module_& m) {
    py::class_<LineWords>(m, "LineWords", "Cached per-word token counts of context lines (noderag.tokenize).")
        .def(py::init<int64_t>(), py::arg("max_cached"))
        .def("missing", &LineWords::missing, py::arg("blob").noconvert(), py::arg("offsets").noconvert())
        .def("add", &LineWords::add, py::arg("words"), py::arg("counts"), py::arg("last"), py::arg("breaks"))
        .def("count", &LineWords::count, py::arg("blob").noconvert(), py::arg("offsets").noconvert())
        .def("spaced", &LineWords::spaced, py::arg("words"))
        .def("__len__", &LineWords::size);
}
