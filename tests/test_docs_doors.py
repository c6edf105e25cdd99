"""The copy-paste examples of docs/integrations.md, docs/mcp.md and docs/export.md, run as written.

Every fenced block is run in order in one temporary folder: ``python`` blocks in one namespace,
``bash`` blocks line by line (``pip install`` lines are skipped: the test extra has installed those
packages), ``sql`` blocks against the PostgreSQL server the export example wrote into, ``json``
blocks parsed. ``text`` blocks are reference, not run.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from conftest import REPO, under_ci  # noqa: E402
from doors import need  # noqa: E402

DOCS = REPO / "docs"
_BLOCK = re.compile(r"^```(\w+)\n(.*?)^```", re.M | re.S)


def _blocks(name: str) -> list[tuple[str, str]]:
    found = _BLOCK.findall((DOCS / name).read_text(encoding="utf-8"))
    assert found, f"docs/{name} has no example"
    return found


def _run(name: str, env: dict[str, str] | None = None, sql=None) -> dict:
    ns: dict = {"__name__": "__docs__"}
    run_env = {**os.environ, **(env or {})}
    run_env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + run_env.get("PATH", "")
    ran = {"python": 0, "bash": 0, "sql": 0, "json": 0}
    for lang, code in _blocks(name):
        if lang == "python":
            exec(compile(code, f"docs/{name}", "exec"), ns)  # noqa: S102 - the documented example
        elif lang == "bash":
            for line in code.splitlines():
                if line.strip() and not line.lstrip().startswith(("#", "pip install")):
                    proc = subprocess.run(["bash", "-c", line], env=run_env, capture_output=True, text=True,
                                          timeout=300)
                    assert proc.returncode == 0, f"docs/{name}: `{line}` failed: {proc.stderr.strip()[-500:]}"
                    ran["bash"] += 1
            continue
        elif lang == "sql":
            assert sql is not None, f"docs/{name}: an sql block but no database"
            sql(code)
        elif lang == "json":
            json.loads(code)
        elif lang != "text":
            raise AssertionError(f"docs/{name}: a {lang!r} block the test does not know how to run")
        if lang in ran:
            ran[lang] += 1
    return ran


def test_integrations_example(tmp_path, monkeypatch, capsys):
    need("langchain_core")
    need("llama_index.core")
    monkeypatch.chdir(tmp_path)
    ran = _run("integrations.md")
    assert ran["python"] == 1
    assert "Ilse Marren, in 1979." in capsys.readouterr().out


@pytest.mark.slow
def test_mcp_example(tmp_path, monkeypatch, capfd):
    need("mcp")
    monkeypatch.chdir(tmp_path)
    ran = _run("mcp.md")  # the SDK's stdio client hands sys.stderr to the server process: fd-level capture
    assert ran["python"] == 1 and ran["json"] == 1
    out = capfd.readouterr().out.splitlines()
    assert out[0] == "['retrieve', 'retrieve_many', 'get_node']"
    assert "03_haldis_lighthouse.md" in out[1]
    assert out[3].startswith("True ") and "question" in out[3]


@pytest.mark.slow
def test_export_example(tmp_path, monkeypatch, capsys):
    psycopg = need("psycopg")
    from noderag.export.local_pg import PostgresNotFound, temporary_cluster

    monkeypatch.chdir(tmp_path)
    results: list[list[tuple]] = []

    def sql(code: str) -> None:
        with psycopg.connect(dsn) as conn:
            for stmt in [s.strip() for s in code.split(";") if s.strip()]:
                results.append(conn.execute(stmt).fetchall())

    try:
        with temporary_cluster() as dsn:
            ran = _run("export.md", env={"PGDSN": dsn}, sql=sql)
    except PostgresNotFound as exc:
        if under_ci():
            raise AssertionError(f"{exc} (.ci/run installs it)") from exc
        pytest.skip(str(exc))
    assert ran["bash"] == 6 and ran["python"] == 2 and ran["sql"] == 1
    assert (tmp_path / "demo.graphml").is_file() and (tmp_path / "demo-parquet" / "vectors.parquet").is_file()
    assert (tmp_path / "demo-neo4j" / "import.cypher").is_file() and (tmp_path / "entities.graphml").is_file()
    neighbours, passages = results
    assert len(neighbours) > 3 and {r[0] for r in neighbours} >= {"S"}
    assert len(passages) == 1 and passages[0][0] == "Haldis Lighthouse"
    out = capsys.readouterr().out
    assert "'vectors':" in out and "edges" in out
