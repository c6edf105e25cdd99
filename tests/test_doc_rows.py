"""DocumentRows answers as the list of row dicts it stands for, without a dict per indexed row."""

from __future__ import annotations

import random

import pyarrow as pa
import pytest

from noderag.indexing.doc_rows import DocumentRows
from noderag.store.tables import documents_table


def _rows(n: int, start: int = 0, seed: int = 0) -> list[dict]:
    rng = random.Random(seed)
    return [{"doc_id": start + i, "source": f"s{rng.randrange(n // 2 + 1)}-{start + i % 3}", "title": f"T{i}",
             "content_hash": f"h{rng.randrange(n + 1)}", "chunk_ids": [2 * (start + i), 2 * (start + i) + 1]}
            for i in range(n)]


@pytest.mark.parametrize("seed", range(5))
def test_document_rows_match_the_list_of_dicts(seed):
    rng = random.Random(seed)
    n_old, n_new = rng.randrange(0, 40), rng.randrange(0, 10)
    old, new = _rows(n_old, seed=seed), _rows(n_new, start=n_old, seed=seed + 100)
    # the table as it is read back from documents.parquet: in chunks
    table = pa.concat_tables([documents_table(old[:n_old // 2]), documents_table(old[n_old // 2:])])
    rows = DocumentRows(table if n_old else None)
    for r in new:
        rows.append(r)
    want = old + new
    assert len(rows) == len(want) and list(rows) == want
    for _ in range(20):
        a, b = sorted(rng.randrange(0, len(want) + 2) for _ in range(2))
        assert rows[a:b] == want[a:b]
        assert rows[a:] == want[a:]
        head = rows.head(a, [{"doc_id": -1}]) if a <= len(want) else None
        if head is not None:
            assert list(head) == want[:a] + [{"doc_id": -1}]
    for column in ("source", "content_hash"):
        values = list({d[column] for d in want} | {"absent", "s0-0"})
        rng.shuffle(values)
        values = values[:7]
        assert rows.doc_ids_where(column, values) == [d["doc_id"] for d in want if d[column] in values]
        assert rows.present(column, values) == [any(d[column] == v for d in want) for v in values]
    assert rows.to_table().equals(documents_table(want))
