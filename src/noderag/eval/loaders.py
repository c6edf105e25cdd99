"""Dataset loaders for ``noderag eval``: one corpus and one list of questions with gold passage ids.

Why one shape: every format the field publishes says which passages support a question in its own
way (ids in a field, qrels rows, ``is_supporting`` flags, titles in ``supporting_facts``). Each
loader maps that onto the corpus ids that retrieval returns, so the scoring code never knows the
format. Formats (detected from the files, or named):

``noderag``   a folder with ``corpus.jsonl`` ({id, title, text}) and ``questions.jsonl``
              ({id, question, supporting_ids, answer?, answer_aliases?, ...}).
``beir``      a folder with ``corpus.jsonl`` ({_id, title, text}), ``queries.jsonl`` ({_id, text})
              and ``qrels/<split>.tsv`` (query-id, corpus-id, score; score > 0 is gold).
``hipporag``  ``<name>.json`` (a list of questions with ``paragraphs`` + ``is_supporting``, or
              ``supporting_facts`` titles) beside ``<name>_corpus.json`` (a list of {title, text}).
``musique``   a raw MuSiQue file (.jsonl or .json): questions with ``paragraphs`` carrying
              ``is_supporting``; the corpus is every distinct paragraph.
``2wiki`` / ``hotpotqa``  a raw 2WikiMultiHopQA / HotpotQA .json list: ``context`` ([title,
              sentences] pairs) and ``supporting_facts`` ([title, sentence] pairs, gold by title);
              the corpus is every distinct context paragraph.
``demo``      the demo corpus and questions shipped with noderag (``DATA`` given as ``demo``): the
              documents are the demo files (ids: their paths, as a build of the folder names them),
              gold by file name (``supporting_sources``).

Gold mapping: by id where the format has ids; otherwise by title, and by title + text where a
title repeats in the corpus (texts compared without whitespace, since datasets join sentences
differently). Gold that maps to nothing is counted (``unmapped_gold``) and reported; a question
left without any gold is skipped and counted, never scored as zero. Passages whose title and text
repeat an earlier passage are merged into the first (an index keeps one copy), gold included.

Bad input raises :class:`DatasetError` with one line naming the file, the line or entry, and the field.
"""

from __future__ import annotations

import csv
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Sequence

from .metrics import musique_hops

from ..errors import NodeRAGError
from ..jsonl import json_objects, json_problem

__all__ = ["DatasetError", "Question", "Dataset", "FORMATS", "detect_format", "load_dataset", "write_corpus_jsonl"]

FORMATS = ("noderag", "beir", "hipporag", "musique", "2wiki", "hotpotqa", "demo")

# question fields that are text or structure, never a breakdown label
_NOT_LABELS = {"id", "_id", "question", "text", "answer", "answer_aliases", "answers", "supporting_ids",
               "supporting_facts", "paragraphs", "context", "decomposition", "question_decomposition", "evidences",
               "metadata", "title"}
_MAX_LABELS = 20  # a string field with more distinct values than this is not a category


class DatasetError(NodeRAGError, ValueError):
    """A dataset that cannot be read or scored; the message is one line naming file and field."""


@dataclass
class Question:
    """One question: its text, gold corpus ids (mapped, non-empty), gold answers and breakdown labels."""

    id: str
    question: str
    gold: list[str]
    answers: list[str] = field(default_factory=list)
    labels: dict[str, str] = field(default_factory=dict)


@dataclass
class Dataset:
    """A loaded dataset: corpus rows ({id, title, text}), scorable questions and loading counts.

    ``stats``: ``questions_read``, ``questions_skipped`` (no gold mapped), ``gold_total``,
    ``gold_unmapped``, ``passages_read``, ``duplicate_passages`` (merged into an earlier copy),
    ``empty_passages`` (no text: a build skips them, gold pointing there is unmapped).
    """

    name: str
    format: str
    corpus: list[dict]
    questions: list[Question]
    files: list[str]
    stats: dict[str, int]
    corpus_file: Path | None = None  # the dataset's own corpus.jsonl, buildable as is (noderag format)


# ----------------------------------------------------------------------------- reading files

def _read_json(path: Path) -> Any:
    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)
    except json.JSONDecodeError as exc:
        raise DatasetError(f"{path}:{exc.lineno}: invalid JSON ({json_problem(exc)})") from None
    except UnicodeDecodeError as exc:
        raise DatasetError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None


def _iter_jsonl(path: Path) -> Iterator[tuple[int, dict]]:
    try:
        with open(path, encoding="utf-8") as fh:
            yield from json_objects(fh, path, DatasetError)
    except UnicodeDecodeError as exc:
        raise DatasetError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None


def _first_record(path: Path) -> dict | None:
    """The first object of a .jsonl file or of a .json list (None when there is none); cheap for .jsonl."""
    if path.suffix == ".jsonl":
        for _, obj in _iter_jsonl(path):
            return obj
        return None
    data = _read_json(path)
    if isinstance(data, list) and data and isinstance(data[0], dict):
        return data[0]
    if isinstance(data, dict) and isinstance(data.get("data"), list) and data["data"]:
        return data["data"][0]
    return None


def _records(path: Path) -> list[tuple[str, dict]]:
    """(where, object) of every record of a .jsonl file or .json list; ``where`` is ``path:line`` / ``path[i]``."""
    if path.suffix == ".jsonl":
        return [(f"{path}:{ln}", obj) for ln, obj in _iter_jsonl(path)]
    data = _read_json(path)
    if isinstance(data, dict) and isinstance(data.get("data"), list):
        data = data["data"]
    if not isinstance(data, list):
        raise DatasetError(f"{path}: expected a JSON list of objects, got {type(data).__name__}")
    out = []
    for i, obj in enumerate(data):
        if not isinstance(obj, dict):
            raise DatasetError(f"{path}[{i}]: expected a JSON object, got {type(obj).__name__}")
        out.append((f"{path}[{i}]", obj))
    return out


def _str_field(where: str, obj: dict, *names: str, required: bool = True) -> str | None:
    """The first of ``names`` present in ``obj`` as a string (ints accepted for ids)."""
    for name in names:
        if name in obj and obj[name] is not None:
            v = obj[name]
            if isinstance(v, bool) or not isinstance(v, (str, int)):
                raise DatasetError(f"{where}: field {name!r} must be a string, got {type(v).__name__}")
            return str(v)
    if required:
        raise DatasetError(f"{where}: missing field {names[0]!r}" + (f" (or {', '.join(map(repr, names[1:]))})"
                                                                      if len(names) > 1 else ""))
    return None


def _answers(where: str, obj: dict) -> list[str]:
    """Gold answers: ``answer`` (string or list) plus ``answer_aliases``/``answers`` strings."""
    out: list[str] = []
    for name in ("answer", "answers", "answer_aliases"):
        v = obj.get(name)
        if v is None:
            continue
        vals = [v] if isinstance(v, (str, int, float)) and not isinstance(v, bool) else v
        if not isinstance(vals, list):
            raise DatasetError(f"{where}: field {name!r} must be a string or a list of strings, got {type(v).__name__}")
        out += [str(a) for a in vals if isinstance(a, (str, int, float)) and str(a).strip()]
    return list(dict.fromkeys(out))


def _labels(obj: dict, qid: str) -> dict[str, str]:
    """Candidate breakdown labels: scalar string/bool/int fields not known to be text, plus MuSiQue hops."""
    out = {}
    for k, v in obj.items():
        if k in _NOT_LABELS or isinstance(v, (dict, list)) or v is None:
            continue
        if isinstance(v, (str, bool, int)) and len(str(v)) <= 64:
            out[k] = str(v)
    try:
        out.setdefault("hops", musique_hops(qid))
    except ValueError:
        pass
    return out


def _squash(text: str) -> str:
    """Text without any whitespace: the key that compares passages whatever joined their sentences."""
    return re.sub(r"\s+", "", text)


def _join_sentences(sents: Sequence[str]) -> str:
    """Sentences of a context paragraph as one text: as given where they carry their own spaces, else one space."""
    out = ""
    for s in sents:
        s = str(s)
        out += s if (not out or s[:1].isspace() or out[-1:].isspace()) else " " + s
    return out.strip()


# ----------------------------------------------------------------------------- corpus with title/text lookup

class _Corpus:
    """Corpus rows in order, duplicates (same title and text) merged, with id and title(+text) lookup."""

    def __init__(self, prefix: str = "") -> None:
        self.prefix = prefix  # of the ids given to passages that have none (raw formats)
        self.rows: list[dict] = []
        self.by_id: dict[str, str | None] = {}  # any id read (duplicates too) -> kept id (None: empty text)
        self.by_key: dict[tuple[str, str], str] = {}  # (title, squashed text) -> kept id
        self.by_title: dict[str, list[str]] = {}
        self.read = 0
        self.duplicates = 0
        self.empty = 0

    def add(self, pid: str | None, title: str | None, text: str, where: str) -> str | None:
        """Add one passage; returns the id it is kept under (an earlier copy's), None for an empty text.

        ``pid`` None: the passage has no id of its own and gets ``<prefix>-<n>`` (n: its place among the
        distinct passages), so raw files give the same ids in every run.
        """
        self.read += 1
        title = (title or "").strip()
        key = (title, _squash(text))
        if not key[1]:  # a build skips empty documents: nothing to retrieve
            self.empty += 1
            if pid is not None:
                self.by_id.setdefault(pid, None)
            return None
        if pid is None:
            kept = self.by_key.get(key)
            if kept is not None:
                self.duplicates += 1
                return kept
            pid = f"{self.prefix}-{len(self.rows):05d}"
        if pid in self.by_id:
            first = self.by_id[pid]
            if self.by_key.get(key) != first:
                raise DatasetError(f"{where}: field 'id': passage id {pid!r} repeats with a different title or text")
            self.duplicates += 1
            return first
        kept = self.by_key.get(key)
        if kept is not None:
            self.duplicates += 1
            self.by_id[pid] = kept
            return kept
        self.rows.append({"id": pid, "title": title, "text": text})
        self.by_id[pid] = pid
        self.by_key[key] = pid
        self.by_title.setdefault(title, []).append(pid)
        return pid

    def find(self, title: str, text: str | None = None) -> str | None:
        """The id of the passage with this title (and text where the title repeats), else None."""
        title = (title or "").strip()
        if text is not None:
            hit = self.by_key.get((title, _squash(text)))
            if hit is not None:
                return hit
        ids = self.by_title.get(title, [])
        return ids[0] if len(ids) == 1 else None


class _Gold:
    """Counts of gold mapping over a load."""

    def __init__(self) -> None:
        self.total = 0
        self.unmapped = 0
        self.skipped = 0
        self.read = 0


def _question(gold_ids: list[str | None], qid: str, text: str, obj: dict, where: str, g: _Gold,
              out: list[Question]) -> None:
    g.read += 1
    g.total += len(gold_ids)
    mapped = list(dict.fromkeys(x for x in gold_ids if x is not None))
    g.unmapped += sum(x is None for x in gold_ids)
    if not mapped:
        g.skipped += 1
        return
    out.append(Question(qid, text, mapped, _answers(where, obj), _labels(obj, qid)))


def _dataset(name: str, fmt: str, corpus: _Corpus, questions: list[Question], files: list[Path], g: _Gold,
             corpus_file: Path | None = None) -> Dataset:
    if not corpus.rows:
        raise DatasetError(f"{files[0]}: the corpus has no passages")
    seen: dict[str, int] = {}
    for q in questions:
        if q.id in seen:
            raise DatasetError(f"{files[-1]}: field 'id': question id {q.id!r} appears twice")
        seen[q.id] = 1
    # a label is a category when it takes few values over the questions (type, level, hops)
    values: dict[str, set] = {}
    for q in questions:
        for k, v in q.labels.items():
            values.setdefault(k, set()).add(v)
    keep = {k for k, v in values.items() if 1 < len(v) <= _MAX_LABELS}
    for q in questions:
        q.labels = {k: v for k, v in q.labels.items() if k in keep}
    stats = {"questions_read": g.read, "questions_skipped": g.skipped, "gold_total": g.total,
             "gold_unmapped": g.unmapped, "passages_read": corpus.read, "duplicate_passages": corpus.duplicates,
             "empty_passages": corpus.empty}
    return Dataset(name, fmt, corpus.rows, questions, [str(f) for f in files], stats, corpus_file)


# ----------------------------------------------------------------------------- formats

def _load_noderag(root: Path) -> Dataset:
    cpath, qpath = root / "corpus.jsonl", root / "questions.jsonl"
    corpus = _Corpus()
    for ln, obj in _iter_jsonl(cpath):
        where = f"{cpath}:{ln}"
        pid = _str_field(where, obj, "id")
        text = obj.get("text")
        if not isinstance(text, str):
            raise DatasetError(f"{where}: missing string field 'text'")
        corpus.add(pid, _str_field(where, obj, "title", required=False), text, where)
    g, questions = _Gold(), []
    for ln, obj in _iter_jsonl(qpath):
        where = f"{qpath}:{ln}"
        qid = _str_field(where, obj, "id")
        text = _str_field(where, obj, "question")
        sup = obj.get("supporting_ids")
        if not isinstance(sup, list) or not all(isinstance(s, (str, int)) and not isinstance(s, bool) for s in sup):
            raise DatasetError(f"{where}: field 'supporting_ids' must be a list of passage ids")
        missing = [str(s) for s in sup if str(s) not in corpus.by_id]
        if missing:
            raise DatasetError(f"{where}: field 'supporting_ids': {missing[:3]} not in {cpath.name}"
                               + (f" (and {len(missing) - 3} more)" if len(missing) > 3 else ""))
        _question([corpus.by_id[str(s)] for s in sup], qid, text, obj, where, g, questions)
    return _dataset(root.name, "noderag", corpus, questions, [cpath, qpath], g,
                    corpus_file=cpath if not (corpus.duplicates or corpus.empty) else None)


def _beir_split(root: Path, split: str | None) -> Path:
    qdir = root / "qrels"
    files = sorted(qdir.glob("*.tsv")) if qdir.is_dir() else []
    if not files:
        raise DatasetError(f"{qdir}: no qrels/<split>.tsv file")
    names = [f.stem for f in files]
    if split is None:
        split = "test" if "test" in names else (names[0] if len(names) == 1 else None)
        if split is None:
            raise DatasetError(f"{qdir}: several splits {names}: name one with --split")
    if split not in names:
        raise DatasetError(f"{qdir}: no split {split!r} (have {names})")
    return qdir / f"{split}.tsv"


def _load_beir(root: Path, split: str | None) -> Dataset:
    cpath, qpath = root / "corpus.jsonl", root / "queries.jsonl"
    rpath = _beir_split(root, split)
    corpus = _Corpus()
    for ln, obj in _iter_jsonl(cpath):
        where = f"{cpath}:{ln}"
        text = obj.get("text")
        if not isinstance(text, str):
            raise DatasetError(f"{where}: missing string field 'text'")
        corpus.add(_str_field(where, obj, "_id", "id"), _str_field(where, obj, "title", required=False), text, where)
    queries: dict[str, tuple[str, dict, str]] = {}
    for ln, obj in _iter_jsonl(qpath):
        where = f"{qpath}:{ln}"
        queries[_str_field(where, obj, "_id", "id")] = (_str_field(where, obj, "text", "question"), obj, where)
    gold: dict[str, list[str | None]] = {}
    with open(rpath, encoding="utf-8", newline="") as fh:
        for ln, row in enumerate(csv.reader(fh, delimiter="\t"), 1):
            if not row or (ln == 1 and row[0].strip().lower() in ("query-id", "query_id", "qid")):
                continue
            if len(row) < 2:
                raise DatasetError(f"{rpath}:{ln}: expected query-id<TAB>corpus-id<TAB>score")
            qid, pid = row[0].strip(), row[1].strip()
            if qid not in queries:
                raise DatasetError(f"{rpath}:{ln}: field 'query-id': {qid!r} is not in {qpath.name}")
            score = row[2].strip() if len(row) > 2 else "1"
            try:
                if float(score) <= 0:
                    continue
            except ValueError:
                raise DatasetError(f"{rpath}:{ln}: field 'score': {score!r} is not a number") from None
            gold.setdefault(qid, []).append(corpus.by_id.get(pid))
    g, questions = _Gold(), []
    for qid, ids in gold.items():
        text, obj, where = queries[qid]
        _question(ids, qid, text, {**obj.get("metadata", {}), **obj} if isinstance(obj.get("metadata"), dict)
                  else obj, where, g, questions)
    return _dataset(root.name, "beir", corpus, questions, [cpath, qpath, rpath], g)


def _paragraph(where: str, p: Any, i: int) -> tuple[str, str, bool, str | None]:
    """(title, text, is_supporting, idx) of a MuSiQue-style paragraph."""
    if not isinstance(p, dict):
        raise DatasetError(f"{where}: field 'paragraphs[{i}]' must be an object")
    text = p.get("paragraph_text", p.get("text"))
    if not isinstance(text, str):
        raise DatasetError(f"{where}: field 'paragraphs[{i}].paragraph_text' missing or not a string")
    title = p.get("title") or ""
    idx = p.get("idx")
    return str(title), text, bool(p.get("is_supporting")), None if idx is None else str(idx)


def _context(where: str, obj: dict) -> list[tuple[str, str]]:
    """(title, text) pairs of a HotpotQA/2Wiki ``context``."""
    ctx = obj.get("context")
    if not isinstance(ctx, list):
        raise DatasetError(f"{where}: field 'context' must be a list of [title, sentences] pairs")
    out = []
    for i, item in enumerate(ctx):
        if isinstance(item, dict):  # some releases: {"title", "sentences"}
            title, sents = item.get("title"), item.get("sentences", item.get("text"))
        elif isinstance(item, (list, tuple)) and len(item) == 2:
            title, sents = item
        else:
            raise DatasetError(f"{where}: field 'context[{i}]' must be a [title, sentences] pair")
        if isinstance(sents, str):
            sents = [sents]
        if not isinstance(title, str) or not isinstance(sents, list):
            raise DatasetError(f"{where}: field 'context[{i}]' must be a [title, sentences] pair")
        out.append((title, _join_sentences(sents)))
    return out


def _supporting_titles(where: str, obj: dict) -> list[str]:
    sf = obj.get("supporting_facts")
    if isinstance(sf, dict) and isinstance(sf.get("title"), list):  # the HF datasets layout
        return list(dict.fromkeys(str(t) for t in sf["title"]))
    if not isinstance(sf, list):
        raise DatasetError(f"{where}: field 'supporting_facts' must be a list of [title, sentence] pairs")
    titles = []
    for i, item in enumerate(sf):
        if isinstance(item, (list, tuple)) and item and isinstance(item[0], str):
            titles.append(item[0])
        elif isinstance(item, str):
            titles.append(item)
        else:
            raise DatasetError(f"{where}: field 'supporting_facts[{i}]' must be a [title, sentence] pair")
    return list(dict.fromkeys(titles))


def _raw_gold(where: str, obj: dict, corpus: _Corpus, add_context: bool) -> list[str | None]:
    """Gold ids of one raw/HippoRAG question, adding its paragraphs to the corpus when ``add_context``."""
    if "paragraphs" in obj:
        paras = obj["paragraphs"]
        if not isinstance(paras, list):
            raise DatasetError(f"{where}: field 'paragraphs' must be a list")
        gold = []
        for i, p in enumerate(paras):
            title, text, sup, _ = _paragraph(where, p, i)
            pid = corpus.add(None, title, text, where) if add_context else corpus.find(title, text)
            if sup:
                gold.append(pid)
        if not any(isinstance(p, dict) and "is_supporting" in p for p in paras):
            raise DatasetError(f"{where}: field 'paragraphs[].is_supporting' missing: no gold to score")
        return gold
    titles = _supporting_titles(where, obj)
    ctx = dict(_context(where, obj)) if "context" in obj else {}
    if add_context:
        for title, text in _context(where, obj):
            corpus.add(None, title, text, where)
    return [corpus.find(t, ctx.get(t)) for t in titles]


def _load_raw(path: Path, fmt: str) -> Dataset:
    corpus = _Corpus(path.name.split(".")[0])
    g, questions = _Gold(), []
    for where, obj in _records(path):
        qid = _str_field(where, obj, "id", "_id")
        gold = _raw_gold(where, obj, corpus, add_context=True)
        _question(gold, qid, _str_field(where, obj, "question"), obj, where, g, questions)
    return _dataset(corpus.prefix, fmt, corpus, questions, [path], g)


def _hipporag_pair(path: Path) -> tuple[Path, Path] | None:
    """(questions, corpus) files of a HippoRAG dataset given as either file or their folder."""
    if path.is_file():
        stem = path.name[:-len(".json")] if path.name.endswith(".json") else None
        if stem is None:
            return None
        if stem.endswith("_corpus"):
            q = path.with_name(stem[:-len("_corpus")] + ".json")
            return (q, path) if q.is_file() else None
        c = path.with_name(f"{stem}_corpus.json")
        return (path, c) if c.is_file() else None
    pairs = [(p.with_name(p.name[:-len("_corpus.json")] + ".json"), p) for p in sorted(path.glob("*_corpus.json"))]
    pairs = [(q, c) for q, c in pairs if q.is_file()]
    return pairs[0] if len(pairs) == 1 else None


def _load_hipporag(path: Path) -> Dataset:
    pair = _hipporag_pair(path)
    if pair is None:
        raise DatasetError(f"{path}: no <name>.json beside a <name>_corpus.json (HippoRAG layout)")
    qpath, cpath = pair
    corpus = _Corpus(qpath.stem)
    for where, obj in _records(cpath):
        text = obj.get("text", obj.get("paragraph_text"))
        if not isinstance(text, str):
            raise DatasetError(f"{where}: missing string field 'text'")
        pid = _str_field(where, obj, "id", "_id", "idx", required=False)
        corpus.add(pid, _str_field(where, obj, "title", required=False), text, where)
    g, questions = _Gold(), []
    for where, obj in _records(qpath):
        qid = _str_field(where, obj, "id", "_id")
        gold = _raw_gold(where, obj, corpus, add_context=False)
        _question(gold, qid, _str_field(where, obj, "question"), obj, where, g, questions)
    return _dataset(qpath.stem, "hipporag", corpus, questions, [cpath, qpath], g)


# ----------------------------------------------------------------------------- detection

def detect_format(path: str | Path) -> str:
    """The format of the dataset at ``path`` (a folder or file), from its file names and first record."""
    path = Path(path)
    if not path.exists():
        raise DatasetError(f"{path}: no such file or folder")
    if path.is_dir():
        if (path / "queries.jsonl").is_file() and (path / "qrels").is_dir():
            return "beir"
        if (path / "corpus.jsonl").is_file() and (path / "questions.jsonl").is_file():
            return "noderag"
        if _hipporag_pair(path) is not None:
            return "hipporag"
        raise DatasetError(f"{path}: cannot detect the dataset format (expected corpus.jsonl + questions.jsonl, "
                           "BEIR corpus.jsonl + queries.jsonl + qrels/, or <name>.json + <name>_corpus.json); "
                           f"name it with --format ({', '.join(FORMATS)})")
    if _hipporag_pair(path) is not None:
        return "hipporag"
    if path.suffix not in (".json", ".jsonl"):
        raise DatasetError(f"{path}: cannot detect the dataset format of a {path.suffix or 'suffix-less'} file; "
                           f"name it with --format ({', '.join(FORMATS)})")
    first = _first_record(path)
    if first is None:
        raise DatasetError(f"{path}: no question records")
    if "paragraphs" in first:
        return "musique"
    if "context" in first and "supporting_facts" in first:
        return "hotpotqa" if "level" in first else "2wiki"  # both read alike; the name labels the results
    raise DatasetError(f"{path}: cannot detect the dataset format: the first record has neither 'paragraphs' "
                       f"nor 'context' + 'supporting_facts' (fields: {sorted(first)[:8]}); name it with --format")


def _load_demo() -> Dataset:
    from ..data import demo_dir, demo_questions
    from ..indexing.ingest import iter_documents

    corpus = _Corpus()
    by_name: dict[str, str] = {}
    for doc in iter_documents([str(demo_dir())]):
        pid = corpus.add(doc.source, doc.title, doc.text, doc.origin)
        if pid is not None:
            by_name[Path(doc.source).name] = pid
    qpath = demo_dir().parent / "demo_questions.jsonl"
    g, questions = _Gold(), []
    for i, obj in enumerate(demo_questions()):
        where = f"{qpath}:{i + 1}"
        names = obj.get("supporting_sources")
        if not isinstance(names, list):
            raise DatasetError(f"{where}: field 'supporting_sources' must be a list of file names")
        _question([by_name.get(str(n)) for n in names], _str_field(where, obj, "id"),
                  _str_field(where, obj, "question"), obj, where, g, questions)
    return _dataset("demo", "demo", corpus, questions, [demo_dir(), qpath], g)


def load_dataset(path: str | Path, *, format: str | None = None, split: str | None = None) -> Dataset:
    """Load the dataset at ``path`` in ``format`` (detected when None); see the module notes.

    ``path`` "demo" (when no such file or folder exists) is the demo corpus shipped with noderag.
    """
    if format == "demo" or (format is None and str(path) == "demo" and not Path(path).exists()):
        return _load_demo()
    path = Path(path)
    fmt = format or detect_format(path)
    if fmt not in FORMATS:
        raise DatasetError(f"unknown format {fmt!r}: choose from {', '.join(FORMATS)}")
    if not path.exists():
        raise DatasetError(f"{path}: no such file or folder")
    if fmt == "noderag":
        root = path if path.is_dir() else path.parent
        for f in ("corpus.jsonl", "questions.jsonl"):
            if not (root / f).is_file():
                raise DatasetError(f"{root}: missing {f}")
        return _load_noderag(root)
    if fmt == "beir":
        root = path if path.is_dir() else path.parent
        for f in ("corpus.jsonl", "queries.jsonl"):
            if not (root / f).is_file():
                raise DatasetError(f"{root}: missing {f}")
        return _load_beir(root, split)
    if fmt == "hipporag":
        return _load_hipporag(path)
    if path.is_dir():
        raise DatasetError(f"{path}: format {fmt} reads one file, not a folder")
    return _load_raw(path, fmt)


def write_corpus_jsonl(ds: Dataset, path: Path) -> Path:
    """Write the dataset's corpus as ``{id, title, text}`` JSON lines (what ``noderag build`` reads)."""
    with open(path, "w", encoding="utf-8") as fh:
        for row in ds.corpus:
            fh.write(json.dumps({"id": row["id"], "title": row["title"], "text": row["text"]}, ensure_ascii=False) + "\n")
    return path
