"""The store and the query tables implement the typed protocols of noderag.store.protocols: an opened index is
an IndexReader, one segment's query/ and the tables of a generation with deltas are NodeTables."""

from __future__ import annotations

import json

import numpy as np
import pytest

from noderag.api import Index, build
from noderag.search.query_index import QueryIndex, open_query_index
from noderag.search.segments import SegmentedTables, open_segment_tables
from noderag.store.protocols import IndexReader, NodeTables
from noderag.store.tables import IndexStore


def _jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def index_with_a_delta(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("protocols")
    base = _jsonl(tmp / "a.jsonl", [{"id": "a", "title": "Kessel", "text": "Kessel Harbour was built in 1801."},
                                    {"id": "b", "title": "Lorn", "text": "Lorn Bay lies north of Kessel Harbour."}])
    more = _jsonl(tmp / "b.jsonl", [{"id": "c", "title": "Ardo", "text": "Ardo Fort guards Lorn Bay since 1750."}])
    build([base], tmp / "idx", embed="hash:32", progress=False).close()
    build([more], tmp / "idx", progress=False).close()
    return tmp / "idx"


def test_an_opened_index_is_an_index_reader(index_with_a_delta):
    with Index(index_with_a_delta) as idx:
        assert isinstance(idx, IndexReader) and isinstance(idx, IndexStore)
        assert idx.deltas and idx.segment_folders[0] == idx.path
        assert len(idx.types) == len(idx.keys) == idx.graph.n == idx.nodes.num_rows


def test_query_tables_are_node_tables(index_with_a_delta):
    with Index(index_with_a_delta) as idx:
        base = open_query_index(idx.path)
        whole = open_segment_tables(idx)
        assert isinstance(base, QueryIndex) and isinstance(base, NodeTables)
        assert isinstance(whole, SegmentedTables) and isinstance(whole, NodeTables)
        assert whole.n == idx.graph.n and whole.first == 0 and base.first == 0
        t = np.flatnonzero(np.asarray(idx.types) == 0)
        assert whole.texts(t) == [idx.texts[i] for i in t.tolist()] and len(t) == 3
        assert all(label is not None for label in whole.labels(t))


def test_a_table_without_a_member_is_not_node_tables(index_with_a_delta):
    """The runtime check can fail: a stand-in that lacks ``doc_label`` does not pass as NodeTables."""
    with Index(index_with_a_delta) as idx:
        tables = open_query_index(idx.path)

        class Partial:
            n, first, chunk, doc, active = tables.n, tables.first, tables.chunk, tables.doc, tables.active
            names, lexical = tables.names, tables.lexical
            texts, label, labels = tables.texts, tables.label, tables.labels

        assert not isinstance(Partial(), NodeTables)
        assert not isinstance(tables, IndexReader)
