"""Every stage that can take more than a second shows a bar or a named spinner on stderr, in pipeline order,
and the summary table (build, stats, demo) lists the stages in pipeline order, not the manifest's sorted keys."""

from __future__ import annotations

import json
import re

from noderag.cli import format_summary
from noderag.config import NodeRAGConfig
from noderag.indexing.driver import build_index

ORDER = ("chunk", "decompose", "assemble", "embed T/S", "attributes", "communities", "tables", "vectors",
         "query tables", "finalize")


def test_every_long_stage_shows_progress_in_pipeline_order(tmp_path, capsys):
    src = tmp_path / "docs.jsonl"
    src.write_text("".join(json.dumps({"id": f"d{i}", "text": f"Tower {i} of Wend was raised by Mason Orl{i} "
                                                            f"in {1400 + i}."}) + "\n" for i in range(6)),
                   encoding="utf-8")
    build_index([src], tmp_path / "idx", NodeRAGConfig().with_overrides({"embed.spec": "hash:32"}), progress=True)
    err = capsys.readouterr().err
    where = {}
    for name in ORDER:
        m = re.search(re.escape(name) + r"\s*:", err)
        assert m, f"no progress line for {name!r} in:\n{err}"
        where[name] = m.start()
    assert sorted(ORDER, key=where.get) == list(ORDER)
    for name in ("attributes", "communities", "tables", "vectors", "query tables", "finalize", "assemble"):
        assert re.search(re.escape(name) + r"\s*: done", err), name  # each spinner closes as done


def test_summary_lists_stages_in_pipeline_order():
    stages = {name: {"state": "done", "time_s": 1.0} for name in
              sorted(("ingest", "chunk", "decompose", "assemble", "embed", "attributes", "communities", "tables",
                      "semantic", "finalize"))}  # as a manifest read back from disk holds them
    lines = format_summary({"stages": stages}).splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("stage"))
    shown = [line.split()[0] for line in lines[start + 1:start + 11]]
    assert shown == ["ingest", "chunk", "decompose", "assemble", "embed", "attributes", "communities", "tables",
                     "semantic", "finalize"]
