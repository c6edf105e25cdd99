"""Strings in fixed-size pages (noderag.store.paged_blob) against plain Python: reads across page boundaries,
erasing rewrites exactly the pages that held the erased strings and links the others, and erased strings
read as ""; the page size keeps the page count near its target."""

from __future__ import annotations

import numpy as np
import pytest

from noderag.store.paged_blob import MIN_PAGE, TARGET_PAGES, PagedBytes, erase_strings, page_size_for, write_pages


def _column(seed: int) -> tuple[list[str], np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    strings = ["".join(rng.choice(list("abcdé漢字 xyz"), int(rng.integers(0, 40)))) for _ in range(300)]
    enc = [s.encode("utf-8") for s in strings]
    off = np.zeros(len(enc) + 1, np.int64)
    np.cumsum([len(b) for b in enc], out=off[1:])
    return strings, off, np.frombuffer(b"".join(enc), np.uint8)


@pytest.mark.parametrize("seed", range(4))
def test_paged_strings_read_as_written_and_erase_only_their_pages(tmp_path, seed):
    strings, off, data = _column(seed)
    page = [7, 64, 1000, 1 << 20][seed]  # strings across many page boundaries, or one page
    count = write_pages(tmp_path / "a", data, page)
    assert count == -(-data.size // page) and len(list((tmp_path / "a").iterdir())) == count
    pages = PagedBytes(tmp_path / "a", page, int(off[-1]))
    assert pages.strings(off[:-1].tolist(), off[1:].tolist()) == strings
    assert bytes(pages.to_array()) == bytes(data)
    rng = np.random.default_rng(seed + 10)
    erase = rng.random(len(strings)) < 0.1
    written = erase_strings(tmp_path / "a", tmp_path / "b", off, page, erase)
    held = sorted({p for i in np.flatnonzero(erase) for p in range(int(off[i]) // page, (int(off[i + 1]) - 1) // page + 1)
                   if off[i + 1] > off[i]})
    assert written == held
    for p in range(count):
        same = (tmp_path / "b" / f"{p:06d}.bin").stat().st_ino == (tmp_path / "a" / f"{p:06d}.bin").stat().st_ino
        assert same == (p not in held)
    after = PagedBytes(tmp_path / "b", page, int(off[-1]))
    assert after.strings(off[:-1].tolist(), off[1:].tolist()) == ["" if e else s for s, e in zip(strings, erase)]
    assert not any(s.encode("utf-8") in bytes(after.to_array()) for s, e in zip(strings, erase) if e and len(s) > 12)


def test_page_size_grows_with_the_column():
    assert page_size_for(0) == MIN_PAGE and page_size_for(MIN_PAGE * TARGET_PAGES) == MIN_PAGE
    for total in (10**5, 10**7, 178 * 10**6, 2 * 10**9):
        page = page_size_for(total)
        assert page & (page - 1) == 0 and page >= MIN_PAGE
        assert -(-total // page) <= TARGET_PAGES and (page == MIN_PAGE or -(-total // (page // 2)) > TARGET_PAGES)


def test_a_page_of_the_wrong_size_or_missing_is_named(tmp_path):
    _, off, data = _column(0)
    write_pages(tmp_path / "a", data, 100)
    (tmp_path / "a" / "000002.bin").write_bytes(b"x")
    pages = PagedBytes(tmp_path / "a", 100, int(off[-1]))
    with pytest.raises(ValueError, match=r"000002\.bin: wrong size"):
        pages.read(250, 260)
    (tmp_path / "a" / "000003.bin").unlink()
    with pytest.raises(ValueError, match=r"000003\.bin: missing file"):
        pages.read(300, 310)
