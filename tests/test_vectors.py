"""Tests for noderag.graph.vectors: VectorIndex over usearch and the kNN semantic layer."""

import numpy as np
import pytest

from noderag.graph.vectors import VectorIndex, knn_csr, knn_search


def _clustered(seed=0, n=1500, d=32, centers=30):
    rng = np.random.default_rng(seed)
    c = rng.standard_normal((centers, d))
    x = c[rng.integers(0, centers, n)] + 0.35 * rng.standard_normal((n, d))
    return x.astype(np.float32)


def _brute_knn(x, k):
    u = x / np.linalg.norm(x, axis=1, keepdims=True)
    s = u @ u.T
    np.fill_diagonal(s, -np.inf)
    return np.argsort(-s, axis=1, kind="stable")[:, :k], s


def _recall(got, want):
    hits = sum(len(set(g[g >= 0].tolist()) & set(w.tolist())) for g, w in zip(got, want))
    return hits / want.size


def test_add_search_recall_against_brute_force():
    x = _clustered()
    ids = np.arange(x.shape[0], dtype=np.int64) * 3 + 7  # non-contiguous node ids
    index = VectorIndex(x.shape[1])
    index.add(ids, x)
    assert len(index) == x.shape[0] and index.metric == "cos" and index.dtype == "f16"
    got, dist = index.search(x[:200], 10)
    assert got.dtype == np.int64 and got.shape == (200, 10)
    assert dist.dtype == np.float32 and dist.shape == (200, 10)
    want, sims = _brute_knn(x, 9)
    # the query itself is the nearest hit (distance ~0); the rest are its true neighbours
    np.testing.assert_array_equal(got[:, 0], ids[:200])
    assert _recall((got[:, 1:] - 7) // 3, want[:200]) >= 0.95
    assert np.all(np.diff(dist, axis=1) >= -1e-3)
    # distances are 1 - cosine similarity (up to f16 storage error)
    rows = np.arange(200)
    np.testing.assert_allclose(dist[:, 1], 1 - sims[rows, (got[:, 1] - 7) // 3], atol=5e-3)


def test_search_pads_when_k_exceeds_size_and_empty_index():
    index = VectorIndex(4, dtype="f32")
    ids, dist = index.search(np.ones((2, 4)), 3)
    assert np.all(ids == -1) and np.all(np.isinf(dist))
    index.add([5, 9], np.array([[1, 0, 0, 0], [0, 1, 0, 0]], np.float32))
    ids, dist = index.search(np.array([1, 0.1, 0, 0], np.float32), 4)
    np.testing.assert_array_equal(ids, [[5, 9, -1, -1]])
    assert np.isinf(dist[0, 2:]).all() and np.isfinite(dist[0, :2]).all()


def test_validation_errors():
    index = VectorIndex(3)
    index.add([1, 2], np.eye(3, dtype=np.float32)[:2])
    with pytest.raises(ValueError, match="3 columns"):
        index.add([3], np.ones((1, 4)))
    with pytest.raises(ValueError, match="already in the index: \\[2\\]"):
        index.add([2], np.ones((1, 3)))
    with pytest.raises(ValueError, match="distinct"):
        index.add([4, 4], np.ones((2, 3)))
    with pytest.raises(ValueError, match="rows"):
        index.add([4, 5], np.ones((1, 3)))
    with pytest.raises(ValueError, match="integer"):
        index.add([4.0], np.ones((1, 3)))
    with pytest.raises(ValueError, match="non-negative"):
        index.add([-1], np.ones((1, 3)))
    with pytest.raises(ValueError, match="finite"):
        index.add([4], np.array([[np.nan, 0, 0]]))
    with pytest.raises(ValueError, match="real-valued"):
        index.add([4], np.array([["a", "b", "c"]]))
    with pytest.raises(ValueError, match="3 columns"):
        index.search(np.ones((1, 2)), 1)
    with pytest.raises(ValueError, match="k must"):
        index.search(np.ones((1, 3)), 0)
    with pytest.raises(ValueError, match="metric"):
        VectorIndex(3, metric="hamming")
    with pytest.raises(ValueError, match="dtype"):
        VectorIndex(3, dtype="f8")
    with pytest.raises(ValueError, match="ndim"):
        VectorIndex(0)
    assert len(index) == 2  # failed adds changed nothing
    np.testing.assert_array_equal(index.contains([1, 2, 3]), [True, True, False])


def test_save_load_round_trip_and_view(tmp_path):
    x = _clustered(seed=1, n=400)
    index = VectorIndex(x.shape[1], connectivity=8, expansion_search=40)
    index.add(np.arange(400), x)
    path = tmp_path / "sub" / "vectors.usearch"
    index.save(path)
    assert path.is_file()
    # no temp files left; the keys in add order beside the index (one thread added them)
    assert sorted(p.name for p in path.parent.iterdir()) == ["vectors.keys.npy", "vectors.usearch"]
    want = index.search(x[:50], 5)
    for view in (True, False):
        loaded = VectorIndex.load(path, view=view)
        assert len(loaded) == 400 and loaded.ndim == x.shape[1] and loaded.read_only is view
        assert loaded.metric == "cos" and loaded.dtype == "f16"
        got = loaded.search(x[:50], 5)
        np.testing.assert_array_equal(got[0], want[0])
        np.testing.assert_array_equal(got[1], want[1])
    viewed = VectorIndex.load(path, view=True)
    with pytest.raises(ValueError, match="read-only"):
        viewed.add([1000], x[:1])
    writable = VectorIndex.load(path, view=False)
    writable.add([1000], x[:1])
    writable.save(path)  # overwrite atomically while `viewed` still maps the old file
    assert len(VectorIndex.load(path)) == 401 and len(viewed) == 400
    np.testing.assert_array_equal(np.load(path.parent / "vectors.keys.npy"), np.r_[np.arange(400), 1000])
    np.testing.assert_array_equal(viewed.get(np.arange(400)), VectorIndex.load(path).get(np.arange(400)))


def test_load_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="missing.usearch"):
        VectorIndex.load(tmp_path / "missing.usearch")
    junk = tmp_path / "junk.usearch"
    junk.write_bytes(b"not an index" * 50)
    with pytest.raises(ValueError, match="junk.usearch"):
        VectorIndex.load(junk)
    with pytest.raises(ValueError, match="directory"):
        VectorIndex(3).save(tmp_path)


def test_single_thread_build_is_reproducible(tmp_path):
    x = _clustered(seed=2, n=600)
    paths = []
    for i in range(2):
        index = VectorIndex(x.shape[1])
        index.add(np.arange(600), x)
        paths.append(tmp_path / f"v{i}.usearch")
        index.save(paths[-1])
    assert paths[0].read_bytes() == paths[1].read_bytes()
    a = VectorIndex.load(paths[0]).search(x, 5, threads=1)
    b = VectorIndex.load(paths[0]).search(x, 5, threads=0)
    np.testing.assert_array_equal(a[0], b[0])


@pytest.mark.parametrize("exact_below", [10**9, 0])
def test_knn_search_matches_brute_force(exact_below):
    x = _clustered(seed=3, n=1000)
    ids = np.arange(1000) + 50
    nbrs, sims = knn_search(ids, x, 8, exact_below=exact_below)
    assert nbrs.shape == (1000, 8) and sims.dtype == np.float32
    want, s = _brute_knn(x, 8)
    recall = _recall(nbrs - 50, want)
    assert recall >= (0.999 if exact_below else 0.95)
    assert not np.any(nbrs == ids[:, None])  # never itself
    rows = np.repeat(np.arange(1000), 8)
    np.testing.assert_allclose(sims.ravel(), s[rows, (nbrs - 50).ravel()], rtol=1e-5, atol=1e-5)
    assert np.all(np.diff(sims, axis=1) <= 1e-6)


def test_knn_csr_structure():
    x = _clustered(seed=4, n=300)
    ids = np.arange(300) * 2  # every other node of n = 700 is embedded
    csr = knn_csr(700, ids, x, k=5)
    a = csr.to_scipy().toarray()
    np.testing.assert_array_equal(a, a.T)
    assert np.all(np.diag(a) == 0) and np.all(a >= 0)
    assert np.all(csr.degree()[1::2] == 0)  # non-embedded nodes have no semantic edges
    assert np.all(csr.degree()[ids] >= 5)
    assert csr.weights.dtype == np.float32 and np.all(csr.weights > 0) and np.all(csr.weights <= 1.0 + 1e-6)
    # a mutual pair is stored once with its similarity, not summed
    nbrs, sims = knn_search(ids, x, 5)
    u, v = ids[0], nbrs[0, 0]
    assert a[u, v] == pytest.approx(float(sims[0, 0]), rel=1e-6)
    # edges exactly cover the union of the directed kNN lists
    want = np.zeros_like(a, dtype=bool)
    want[np.repeat(ids, 5), nbrs.ravel()] = sims.ravel() > 0
    np.testing.assert_array_equal(a > 0, want | want.T)


def test_knn_csr_drops_nonpositive_and_handles_tiny():
    x = np.array([[1, 0], [-1, 0], [0, 1]], np.float32)
    csr = knn_csr(3, [0, 1, 2], x, k=2)
    assert csr.nnz == 0  # similarities are -1 and 0
    assert knn_csr(5, [], np.zeros((0, 4)), k=3).nnz == 0
    assert knn_csr(5, [2], np.ones((1, 4)), k=3).n == 5
    with pytest.raises(ValueError, match="ids must lie"):
        knn_csr(2, [0, 5], np.ones((2, 3)))
    with pytest.raises(ValueError, match="distinct"):
        knn_csr(4, [1, 1], np.ones((2, 3)))
    with pytest.raises(ValueError, match="shape"):
        knn_csr(4, [1, 2], np.ones((3, 3)))


def test_knn_csr_with_existing_index():
    x = _clustered(seed=5, n=500)
    index = VectorIndex(x.shape[1])
    index.add(np.arange(500), x)
    from_index = knn_csr(500, np.arange(500), x, k=6, index=index)
    exact = knn_csr(500, np.arange(500), x, k=6)
    a, b = from_index.to_scipy().toarray() > 0, exact.to_scipy().toarray() > 0
    assert (a & b).sum() / b.sum() >= 0.95


def test_get_returns_stored_vectors(tmp_path):
    x = _clustered(seed=6, n=50, d=8)
    index = VectorIndex(8)
    index.add(np.arange(50) + 100, x)
    got = index.get([149, 100])
    assert got.dtype == np.float32 and got.shape == (2, 8)
    np.testing.assert_allclose(got, x[[49, 0]], rtol=2e-3, atol=2e-3)  # f16 storage
    np.testing.assert_allclose(index.get(np.array([101])), x[[1]], rtol=2e-3, atol=2e-3)
    assert index.get([]).shape == (0, 8)
    with pytest.raises(ValueError, match="not in the index: \\[7\\]"):
        index.get([100, 7])
    index.save(tmp_path / "v.usearch")
    np.testing.assert_array_equal(VectorIndex.load(tmp_path / "v.usearch").get([149, 100]), got)


@pytest.mark.parametrize("dtype", ["f16", "i8", "f32"])
def test_direct_row_fetch_equals_usearchs_public_get(dtype):
    """get reads rows through usearch's compiled get_many: the same float32 values as its public get."""
    from noderag.graph.vectors import _rows

    x = _clustered(seed=8, n=60, d=12)
    index = VectorIndex(12, dtype=dtype)
    index.add(np.arange(60) * 3, x)
    raw = index._shards[0] if hasattr(index, "_shards") else index._index
    keys = np.array([177, 0, 33, 90], np.uint64)
    want = np.stack(raw.get(keys, dtype=np.float32))
    got = _rows(raw, keys, 12)
    assert got.dtype == np.float32 and got.shape == (4, 12)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(index.get(keys.astype(np.int64)), want)


def test_i8_cosine_accepts_any_norm():
    x = _clustered(seed=7, n=400, d=16) * 5.0  # far from unit norm: usearch normalises before int8
    index = VectorIndex(16, dtype="i8")
    index.add(np.arange(400), x)
    got, dist = index.search(x[:100], 6)
    want, sims = _brute_knn(x, 5)
    np.testing.assert_array_equal(got[:, 0], np.arange(100))
    assert _recall(got[:, 1:], want[:100]) >= 0.9
    np.testing.assert_allclose(dist[:, 1], 1 - sims[np.arange(100), got[:, 1]], atol=0.02)
    np.testing.assert_allclose(np.linalg.norm(index.get([0, 1]), axis=1), 1.0, atol=0.02)


def test_wider_search_beam_does_not_lose_recall_and_is_validated():
    """``expansion`` widens the HNSW beam (a cheap, low-beam build recovers recall at query time)."""
    x = _clustered(seed=3, n=3000, d=48, centers=200)
    index = VectorIndex(x.shape[1], connectivity=4, expansion_add=8)  # a deliberately poor graph
    index.add(np.arange(x.shape[0]), x)
    want, _ = _brute_knn(x, 10)
    narrow, _ = index.search(x[:300], 11, expansion=11)
    wide, _ = index.search(x[:300], 11, expansion=512)
    r_narrow, r_wide = _recall(narrow[:, 1:], want[:300]), _recall(wide[:, 1:], want[:300])
    assert r_wide >= r_narrow + 0.2 and r_wide >= 0.9  # measured: 0.54 -> 0.97
    with pytest.raises(ValueError, match="expansion must be a positive integer"):
        index.search(x[:1], 3, expansion=0)


# ----------------------------------------------------------------------------- shards

def test_sharded_index_is_the_same_for_any_parallelism_and_across_adds(tmp_path):
    """Shards built one thread each give byte-identical files whatever ``parallel`` is, and two
    adds equal one (vector i of the index always goes to shard i % shards)."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((900, 16)).astype(np.float32)
    ids = rng.permutation(5000)[:900]
    blobs = []
    for parallel, cut, background in ((1, 900, False), (3, 900, False), (2, 401, False), (2, 250, True)):
        idx = VectorIndex(16, dtype="f32", shards=3, parallel=parallel)
        if background:  # queued adds, the caller going on meanwhile: the same shards
            idx.add_in_background(ids[:cut], x[:cut])
            idx.add_in_background(ids[cut:], x[cut:])
            idx.wait()
        else:
            idx.add(ids[:cut], x[:cut])
            idx.add(ids[cut:], x[cut:])
        assert len(idx) == 900 and idx.shards == 3
        assert sorted(idx.keys().tolist()) == sorted(ids.tolist())
        out = tmp_path / f"p{parallel}-{cut}"
        idx.save(out / "vectors.usearch")
        names = sorted(p.name for p in out.iterdir())
        assert names == ["vectors.1.usearch", "vectors.2.usearch", "vectors.keys.npy", "vectors.usearch"]
        np.testing.assert_array_equal(np.load(out / "vectors.keys.npy"), ids)  # the add order
        blobs.append([(out / n).read_bytes() for n in names])
    assert blobs[0] == blobs[1] == blobs[2] == blobs[3]


def test_background_add_reports_a_failure_on_wait():
    idx = VectorIndex(8, dtype="f32", shards=2)
    idx.add_in_background(np.arange(4), np.ones((4, 8), np.float32))
    idx.wait()
    # the same keys again: not checked up front (it returns at once); the shard threads' own error
    # (usearch refuses duplicate keys) comes back from wait(), once
    idx.add_in_background(np.arange(4), np.ones((4, 8), np.float32))
    with pytest.raises(RuntimeError, match="[Dd]uplicate keys"):
        idx.wait()
    assert idx.wait() is idx  # reported once: nothing is left pending
    assert sorted(idx.keys().tolist()) == [0, 1, 2, 3]  # the first add is intact
    with pytest.raises(ValueError, match="distinct"):
        idx.add_in_background(np.array([1, 1]), np.ones((2, 8), np.float32))


def test_sharded_search_get_and_load_match_an_exact_search(tmp_path):
    rng = np.random.default_rng(4)
    x = rng.standard_normal((600, 12)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    ids = np.arange(600) * 7
    idx = VectorIndex(12, dtype="f32", shards=4, parallel=2, expansion_add=200, expansion_search=200)
    idx.add(ids, x)
    q = rng.standard_normal((20, 12)).astype(np.float32)
    got, dist = idx.search(q, 10)
    truth = ids[np.argsort(-(q / np.linalg.norm(q, axis=1, keepdims=True)) @ x.T, axis=1)[:, :10]]
    assert np.mean([len(set(a) & set(b)) / 10 for a, b in zip(got.tolist(), truth.tolist())]) >= 0.95
    assert np.all(np.diff(dist, axis=1) >= 0)  # merged shards stay sorted by distance
    np.testing.assert_allclose(idx.get(ids[[5, 300, 599]]), x[[5, 300, 599]], atol=1e-6)
    assert idx.contains(np.array([7 * 5, 1, 7 * 599])).tolist() == [True, False, True]
    with pytest.raises(ValueError, match="already in the index"):
        idx.add(ids[:2], x[:2])
    idx.save(tmp_path / "vectors.usearch")
    back = VectorIndex.load(tmp_path / "vectors.usearch", view=True)
    assert back.shards == 4 and len(back) == 600
    got2, dist2 = back.search(q, 10)
    np.testing.assert_array_equal(got2, got)
    # k beyond the size pads like an unsharded index
    small = VectorIndex(12, dtype="f32", shards=3)
    small.add(ids[:4], x[:4])
    got3, dist3 = small.search(q[:2], 6)
    assert (got3[:, 4:] == -1).all() and np.isinf(dist3[:, 4:]).all()
    assert sorted(got3[0, :4].tolist()) == sorted(ids[:4].tolist())


def test_shard_count_rule():
    from noderag.config import EmbedConfig

    c = EmbedConfig()
    assert [c.vector_shard_count(n) for n in (0, 32_767, 32_768, 524_288, 524_289, 10**8)] == [1, 1, 2, 2, 3, 8]
    assert EmbedConfig(vector_shards=5).vector_shard_count(10) == 5


def test_widened_and_float16_background_builds_equal_one_add(tmp_path):
    """Started on one thread, widened while building, fed float16 rows: the same shard files as one add of
    the float32 values of those rows (a build starts its vector shards early and widens them later)."""
    rng = np.random.default_rng(6)
    x = rng.standard_normal((3000, 16)).astype(np.float16)
    ids = np.arange(3000) * 3
    ref = VectorIndex(16, dtype="i8", shards=3, parallel=3)
    ref.add(ids[:2500], x[:2500].astype(np.float32))
    ref.add(ids[2500:], x[2500:].astype(np.float32))
    idx = VectorIndex(16, dtype="i8", shards=3, parallel=1)
    idx.add_in_background(ids[:2500], x[:2500])
    idx.widen(3)
    idx.add_in_background(ids[2500:], x[2500:])
    idx.wait()
    blobs = []
    for k, index in enumerate((ref, idx)):
        index.save(tmp_path / f"{k}" / "vectors.usearch")
        blobs.append([p.read_bytes() for p in sorted((tmp_path / f"{k}").iterdir())])
    assert blobs[0] == blobs[1] and len(blobs[0]) == 4  # three shards and the keys file


def test_cancel_stops_background_adds():
    idx = VectorIndex(8, dtype="f32", shards=2, parallel=1)
    idx.add_in_background(np.arange(40000), np.ones((40000, 8), np.float32))
    idx.cancel()
    assert len(idx) < 40000  # stopped at a block boundary: never finished
    idx.cancel()  # twice is harmless


def test_shards_on_one_thread_take_turns_block_by_block(monkeypatch):
    """With fewer permits than shards, each shard adds one block and then queues behind the others, so
    the shards come equally far before the build widens (a shard built whole first left one core idle
    while the other finished alone)."""
    import time

    import noderag.graph.vectors as vectors

    monkeypatch.setattr(vectors, "_ADD_BLOCK", 100)
    idx = VectorIndex(8, dtype="f32", shards=2, parallel=1)
    order: list[int] = []
    left = [6, 6]  # blocks per shard

    for j, shard in enumerate(idx._shards):
        def add(keys, vecs, *, threads, _add=shard.add, _j=j):
            # start a block only once the other shard (if it has blocks left) waits at the gate, so that
            # the order does not depend on how fast the threads get scheduled
            deadline = time.monotonic() + 10
            while left[1 - _j] and not idx._gate._queue and time.monotonic() < deadline:
                time.sleep(0.001)
            order.append(_j)
            left[_j] -= 1
            return _add(keys, vecs, threads=threads)
        shard.add = add
    rng = np.random.default_rng(2)
    idx.add_in_background(np.arange(1200), rng.standard_normal((1200, 8)).astype(np.float32))
    idx.wait()
    assert len(idx) == 1200
    assert order == [0, 1] * 6


def test_turn_gate_admits_waiters_in_arrival_order():
    import threading
    import time

    from noderag.graph.vectors import _TurnGate

    gate = _TurnGate(0)
    admitted: list[int] = []

    def enter(k):
        with gate:
            admitted.append(k)

    threads = []
    for k in range(4):
        threads.append(threading.Thread(target=enter, args=(k,)))
        threads[-1].start()
        deadline = time.monotonic() + 10
        while len(gate._queue) < k + 1 and time.monotonic() < deadline:  # queued before the next arrives
            time.sleep(0.001)
    gate.release(1)  # one permit, handed on as each waiter leaves
    for t in threads:
        t.join(10)
    assert admitted == [0, 1, 2, 3]


def test_one_querys_shards_merge_as_the_per_shard_results(tmp_path):
    """A single query's shards, searched in turn on the calling thread or by usearch's own threads, merge to the
    same ``k`` nearest: ids and distances equal the merge of each shard's padded results (ties across shards to
    the lower id), built or loaded, equal the same rows searched as a batch, and no Python thread is started.
    Each vector is stored five times (a copy in every shard): the ties reach the threaded search's last kept
    entry, where it hands the query to the shard-by-shard merge."""
    import threading

    from noderag.graph import vectors as V

    rng = np.random.default_rng(7)
    data = rng.standard_normal((601, 16)).astype(np.float32)[np.arange(3000) % 601]  # ties across shards
    built = VectorIndex(16, dtype="f32", shards=5)
    built.add(np.arange(3000), data)
    built.save(tmp_path / "v.usearch")
    small = VectorIndex(16, dtype="f32", shards=5)
    small.add(np.arange(4), data[:4])  # fewer entries than k: the result is padded
    distinct = VectorIndex(16, dtype="f32", shards=4)
    distinct.add(np.arange(2000), rng.standard_normal((2000, 16)).astype(np.float32))  # no ties
    before = threading.active_count()
    queries = rng.standard_normal((20, 16)).astype(np.float32)
    for vi in (built, VectorIndex.load(tmp_path / "v.usearch"), small, distinct):
        batch = vi.search(queries, 7, expansion=40)
        for i, q in enumerate(queries):
            want = V._merge_nearest_by_id([V._search_one(x, q[None, :], V._per_shard(vi._shards, 7), 1)
                                           for x in vi._shards if len(x)], 7)
            for threads in (1, 2, 0):
                got = vi.search(q[None, :], 7, expansion=40, threads=threads)
                np.testing.assert_array_equal(got[0], want[0])
                np.testing.assert_array_equal(got[1], want[1])
            np.testing.assert_array_equal(got[0][0], batch[0][i])
    assert (small.search(queries[:1], 7)[0] == -1).sum() == 3
    assert threading.active_count() == before


def test_threaded_shard_search_declines_where_a_tie_reaches_its_last_entry():
    """usearch's threads keep the ``wanted`` nearest in the order the shards finish: where the entry past the
    ``k``-th ties the last one kept, which of the tied entries survive is not sure, and the threaded search
    returns None (the caller merges shard by shard); without such a tie it returns the merge, ties to the lower
    id."""
    from noderag.graph import vectors as V

    rng = np.random.default_rng(11)
    base = rng.standard_normal((50, 8)).astype(np.float32)
    tied = VectorIndex(8, dtype="f32", shards=4)
    tied.add(np.arange(800), base[np.arange(800) % 50])  # every vector 16 times, four a shard
    q = base[3][None, :]
    live = [x for x in tied._shards if len(x)]
    assert V._per_shard(live, 3) == 6
    assert V._nearest_threaded(live, q, 3, 6, 2) is None  # 16 at distance 0: the 6 kept all tie the 3rd
    assert V._nearest_threaded(live, q, 3, 6, 1) is None
    plain = VectorIndex(8, dtype="f32", shards=4)
    plain.add(np.arange(400), rng.standard_normal((400, 8)).astype(np.float32))
    live = [x for x in plain._shards if len(x)]
    got = V._nearest_threaded(live, q, 3, V._per_shard(live, 3), 2)
    want = V._merge_nearest_by_id([V._search_one(x, q, V._per_shard(live, 3), 1) for x in live], 3)
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[1], want[1])


def test_search_one_answers_as_the_public_search_api():
    """The compiled call a shard search makes gives what usearch's public ``search`` gives (ids, distances,
    padding past a shard's size)."""
    from usearch.index import Index

    from noderag.graph.vectors import _search_one

    rng = np.random.default_rng(3)
    index = Index(ndim=8, metric="cos", dtype="f32")
    index.add(np.arange(5, dtype=np.uint64) * 7, rng.normal(size=(5, 8)).astype(np.float32), threads=1)

    class PublicOnly:  # no ``_compiled``: the wrapper's path
        def search(self, *a, **kw):
            return index.search(*a, **kw)

    for q in (rng.normal(size=(1, 8)), rng.normal(size=(3, 8))):
        q = q.astype(np.float32)
        for k in (3, 9):
            fast, public = _search_one(index, q, k, 1), _search_one(PublicOnly(), q, k, 1)
            pad = fast[0].shape[1] - public[0].shape[1]  # one query's ``Matches`` comes back trimmed to its count
            assert np.array_equal(fast[0], np.pad(public[0], ((0, 0), (0, pad)), constant_values=-1))
            assert np.array_equal(fast[1], np.pad(public[1], ((0, 0), (0, pad)), constant_values=np.inf))
            assert (fast[0][:, 5:] == -1).all() and (fast[0][:, :5] >= 0).all() if k == 9 else fast[0].shape[1] == 3
