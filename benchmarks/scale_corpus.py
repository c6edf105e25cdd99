"""Deterministic scale corpora: N passages made by repeating real dev-sample passages.

The pool is the passages of ``DATA/<source>/corpus.jsonl`` for each source in order
(default: the English samples ``musique`` then ``hotpotqa``), each file in its line
order. Copy ``k = 0, 1, 2, ...`` of the pool is written in pool order until exactly
``N`` passages are out (the last copy is cut short). In copy ``k >= 1`` every
capitalised word (a run of letters/digits/underscores whose first character is an
upper-case letter) of the title and the text, except the function words of
``FUNCTION_WORDS`` ("The", "In", "Who", ...; kept so that sentence-initial words and
question words stay stop words for the entity extractors), gets the suffix ``"q" + letters(k)``,
where ``letters`` is the bijective base-25 numeral over ``a..z`` without ``q``
(1 -> ``a``, 25 -> ``z``, 26 -> ``aa``). Copy 0 is the original text. So "Paris"
is "Paris" in copy 0, "Parisqa" in copy 1 and "Parisqb" in copy 2: entities do not
merge across copies (the graph grows like a real corpus of N distinct passages
rather than collapsing onto the pool's entities), while the text keeps its
statistics. The rewrite is injective: the last ``q`` of a rewritten word marks the
suffix, which holds no ``q``. Lower-case words, numbers and CJK text are unchanged
(a CJK source, e.g. ``drcd``, therefore merges its entities across copies).
Passage ids are ``<source id>.c<k>``.

The question set of a corpus is every question of the sources whose supporting
passages are all in the corpus, rewritten for copy ``QC`` (question text, answer
and supporting ids), where ``QC`` is drawn with ``random.Random(seed)`` among the
complete copies (copy 0 when there is none).

Files: ``WORK/scale-<N>.jsonl``, ``WORK/scale-<N>.questions.jsonl`` and
``WORK/scale-<N>.params.json`` (the parameters, the sources' SHA-256 and the
outputs' SHA-256). Output is written line by line to a temporary name and renamed,
so a 10^6-passage corpus never sits in memory; a corpus whose params file matches
the request and whose bytes still hash to the recorded SHA-256 is reused.

    python benchmarks/scale_corpus.py N [--data DIR] [--work DIR] [--sources musique hotpotqa] [--seed S]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import re
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

GENERATOR_VERSION = 1  # bump when the output bytes for the same parameters change
DEFAULT_SOURCES = ("musique", "hotpotqa")
DEFAULT_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
_ALPHABET = "abcdefghijklmnoprstuvwxyz"  # 25 letters: no "q", the suffix marker
_WORD = re.compile(r"(?<!\w)[^\W\d_]\w*")
# English function words left unsuffixed when capitalised (a fixed list: the corpus bytes must not depend
# on the package's own stop-word lists, which may change)
FUNCTION_WORDS = frozenset("""
a about above after against all also although an and another any are as at be because been before being
below between both but by can could did do does during each either every few for from had has have he her
here hers him his how however i if in into is it its itself may me might more most much must my neither no
nor not of off on once one only or other our out over own same she should since so some such than that the
their them then there these they this those though through thus to too under until up upon us very was we
were what when where whether which while who whom whose why will with within without would yet you your
""".split())


def copy_suffix(k: int) -> str:
    """Suffix of copy ``k``: "" for copy 0, else "q" + bijective base-25 letters of ``k``."""
    if k < 0:
        raise ValueError(f"copy number must be >= 0, got {k}")
    if k == 0:
        return ""
    out = []
    while k > 0:
        k, r = divmod(k - 1, len(_ALPHABET))
        out.append(_ALPHABET[r])
    return "q" + "".join(reversed(out))


def rewrite(text: str, k: int) -> str:
    """``text`` with every capitalised word given copy ``k``'s suffix (unchanged for copy 0)."""
    suffix = copy_suffix(k)
    if not suffix or not text:
        return text
    def sub(m: re.Match) -> str:
        w = m.group(0)
        return w + suffix if w[0].isupper() and w.lower() not in FUNCTION_WORDS else w

    return _WORD.sub(sub, text)


@dataclass(frozen=True)
class ScaleCorpus:
    """One generated corpus and its question set."""

    passages: int
    corpus: Path
    questions: Path
    params: Path
    pool: int
    question_copy: int
    n_questions: int
    reused: bool


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _read_jsonl(path: Path) -> list[dict]:
    rows = []
    with open(path, encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError as exc:
                    raise ValueError(f"{path}:{lineno}: invalid JSON ({exc.msg})") from None
    return rows


def _load_pool(data: Path, sources: tuple[str, ...]) -> tuple[list[dict], list[dict]]:
    """Passages ({id, title, text}) and questions of the sources, in order; fields checked."""
    passages: list[dict] = []
    questions: list[dict] = []
    for src in sources:
        path = data / src / "corpus.jsonl"
        if not path.is_file():
            raise FileNotFoundError(f"scale corpus source {src!r}: {path} not found")
        for i, row in enumerate(_read_jsonl(path)):
            if not isinstance(row.get("id"), str) or not isinstance(row.get("text"), str):
                raise ValueError(f"{path}: passage {i + 1} needs string 'id' and 'text' fields")
            passages.append({"id": row["id"], "title": row.get("title") or "", "text": row["text"]})
        qpath = data / src / "questions.jsonl"
        if qpath.is_file():
            questions.extend(_read_jsonl(qpath))
    ids = [p["id"] for p in passages]
    if len(set(ids)) != len(ids):
        raise ValueError(f"scale corpus sources {list(sources)}: passage ids repeat across sources")
    return passages, questions


def _params(n: int, data: Path, sources: tuple[str, ...], seed: int) -> dict:
    src = {s: _sha256(data / s / "corpus.jsonl") for s in sources}
    qs = {s: _sha256(data / s / "questions.jsonl") for s in sources if (data / s / "questions.jsonl").is_file()}
    return {"generator_version": GENERATOR_VERSION, "passages": n, "sources": list(sources), "seed": seed,
            "corpus_sha256": src, "questions_sha256": qs}


def _write_atomic_lines(path: Path, lines) -> None:
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    with open(tmp, "w", encoding="utf-8", newline="\n") as fh:
        for line in lines:
            fh.write(line)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def _passage_lines(pool: list[dict], n: int):
    for i in range(n):
        k, j = divmod(i, len(pool))
        p = pool[j]
        row = {"id": f"{p['id']}.c{k}", "title": rewrite(p["title"], k), "text": rewrite(p["text"], k)}
        yield json.dumps(row, ensure_ascii=False) + "\n"


def _question_lines(questions: list[dict], pool: list[dict], n: int, k: int) -> list[str]:
    index = {p["id"]: j for j, p in enumerate(pool)}
    out = []
    for q in questions:
        gold = q.get("supporting_ids") or []
        if not gold or any(g not in index or k * len(pool) + index[g] >= n for g in gold):
            continue
        row = {"id": f"{q['id']}.c{k}", "question": rewrite(q["question"], k),
               "supporting_ids": [f"{g}.c{k}" for g in gold]}
        if isinstance(q.get("answer"), str):
            row["answer"] = rewrite(q["answer"], k)
        out.append(json.dumps(row, ensure_ascii=False) + "\n")
    return out


def generate(n: int, work: str | os.PathLike, *, data: str | os.PathLike = DEFAULT_DATA,
             sources: tuple[str, ...] | list[str] = DEFAULT_SOURCES, seed: int = 0) -> ScaleCorpus:
    """Write (or reuse) the ``n``-passage corpus and its questions under ``work``; see the module docstring."""
    if n < 1:
        raise ValueError(f"passages must be >= 1, got {n}")
    data, work, sources = Path(data), Path(work), tuple(sources)
    work.mkdir(parents=True, exist_ok=True)
    corpus = work / f"scale-{n}.jsonl"
    qfile = work / f"scale-{n}.questions.jsonl"
    pfile = work / f"scale-{n}.params.json"
    params = _params(n, data, sources, seed)
    if pfile.is_file() and corpus.is_file() and qfile.is_file():
        try:
            old = json.loads(pfile.read_text("utf-8"))
        except json.JSONDecodeError:
            old = {}
        if ({k: old.get(k) for k in params} == params and old.get("output_sha256") == _sha256(corpus)
                and old.get("questions_output_sha256") == _sha256(qfile)):
            return ScaleCorpus(n, corpus, qfile, pfile, old["pool"], old["question_copy"], old["n_questions"], True)
    pool, questions = _load_pool(data, sources)
    if not pool:
        raise ValueError(f"scale corpus sources {list(sources)}: no passages")
    full = n // len(pool)
    qcopy = random.Random(seed).randrange(full) if full > 0 else 0
    pfile.unlink(missing_ok=True)
    _write_atomic_lines(corpus, _passage_lines(pool, n))
    qlines = _question_lines(questions, pool, n, qcopy)
    _write_atomic_lines(qfile, qlines)
    params.update(pool=len(pool), question_copy=qcopy, n_questions=len(qlines),
                  output_sha256=_sha256(corpus), questions_output_sha256=_sha256(qfile))
    _write_atomic_lines(pfile, [json.dumps(params, indent=1, sort_keys=True) + "\n"])
    return ScaleCorpus(n, corpus, qfile, pfile, len(pool), qcopy, len(qlines), False)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("passages", type=int, help="number of passages N")
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA, help="folder with <source>/corpus.jsonl")
    ap.add_argument("--work", type=Path, default=Path(__file__).resolve().parents[1] / ".benchcache" / "scale")
    ap.add_argument("--sources", nargs="+", default=list(DEFAULT_SOURCES))
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    res = generate(args.passages, args.work, data=args.data, sources=args.sources, seed=args.seed)
    print(json.dumps({k: str(v) if isinstance(v, Path) else v for k, v in asdict(res).items()}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
