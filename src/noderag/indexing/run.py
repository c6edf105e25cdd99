"""The start of a run: everything before the first stage, resolved once into a plan.

:func:`start_run` does it under the writer lock: open the previous generation, reconcile the
configuration once, ingest, resolve deletions and replacements, choose the run kind
(:mod:`.plan`) and identify the run (a rerun with the same inputs resumes it, :data:`STAGES_RULE`).
It returns a :class:`BuildRun`: the frozen :class:`~noderag.indexing.plan.RunPlan` and the working
data the stages hand on.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from ..config import BUILD_SECTIONS, NodeRAGConfig
from ..errors import BuildError
from ..graph.storage import atomic_write_json
from ..store.tables import IndexNotFoundError, check_layout
from .assemble import EdgeList, NodeTable
from .ingest import IngestError, ingest
from .journal import Journal
from ..store.decompositions import DECOMPOSITIONS
from ..store.layout import (COMMUNITIES, DELTAS, DOCUMENTS, LINKED, NODE_KEYS, NODE_TEXT_OFF, NODE_TYPES, NODES,
                            QUERY_DIR, SCRUBBED, SCRUBBED_KEYS)
from ..store.aliases import has_aliases
from ..store.segments import deltas_of, segment_folders
from .doc_rows import DocumentRows
from .update.delta import background_compaction_due, delete_plan, delta_reason, delta_table, load_documents, rewrite_deltas
from .previous import Previous, load_base, load_tables, open_previous
from .plan import Compaction, DeltaInsert, FreshBuild, Recompute, RunPlan, Scrub
from .progress import Progress
from .update.scrub import scrub_reason
from ..search.query_index import SCRUBBED_TABLES

__all__ = ["BuildRun", "BuildReport", "RunPlan", "STAGES_RULE", "nothing_to_compact", "start_run", "documents_without_text"]


@dataclass
class BuildReport:
    """What a build or insert did: new documents, duplicates skipped, the manifest written."""

    added_documents: int
    duplicates: int
    manifest: dict[str, Any]
    deleted_documents: int = 0
    generation: int | None = None
    background_compaction: int | None = None  # pid of the compaction it started (update.compaction)
    nothing_done: str | None = None  # why a run committed nothing (a compaction with nothing to compact)


def stored_update(manifest: dict, where: Path):
    """The ``[update]`` settings the index's manifest records (the last run's; the defaults for an index written
    before they were recorded)."""
    from ..config import ConfigError, UpdateConfig

    raw = manifest.get(UPDATE_KEY)
    if raw is None:
        return UpdateConfig()
    try:
        return NodeRAGConfig.from_dict({"update": raw}).update
    except ConfigError as exc:
        raise BuildError(f"{where / 'manifest.json'}: {UPDATE_KEY}: {exc}") from None


#: The manifest entry recording the ``[update]`` settings the last write used (later writes without a
#: configuration use them: ``noderag insert`` of an index built with ``update.segments = false`` stays whole).
UPDATE_KEY = "update"


def nothing_to_compact(previous: "Previous", compact: str) -> str | None:
    """Why compacting ``previous`` ("merge" or "full") would change nothing (None: it would).

    A merge has work while the generation has delta segments or nodes a delete in place scrubbed whose edges
    and vectors are still stored. A full compaction has work unless the generation was written by the first
    build or by a full compaction (any other write leaves bytes a fresh build would not: reused quantised
    vectors, retired nodes, node ids in insertion order).
    """
    counts = previous.manifest.get("counts") or {}
    if deltas_of(previous.manifest, previous.path):
        return None
    if (previous.path / SCRUBBED).is_file() or int(counts.get("scrubbed_vectors") or 0):
        return None
    if compact == "full":
        runs = previous.manifest.get("runs") or []
        if len(runs) == 1 or (runs and runs[-1].get("compaction") == "full"):
            return "the index is what a fresh build of its documents writes (nothing was written since)"
        return None
    return "no delta segments and no nodes deleted in place since the last compaction"


@dataclass
class BuildRun:
    """A run's plan and the working data its stages hand on (the stages' own outputs stay in the driver's locals)."""

    plan: RunPlan
    bars: Progress
    journal: Journal | None = None  # None: a scrub (it keeps no stage journal)
    table: NodeTable | None = None  # the node table (the previous generation's survivors first)
    base: EdgeList | None = None  # their decomposed edges
    traces: Any = None  # their chunk traces (None once handed to the assembly)
    docs_rows: Any = None  # document rows, new ones appended by the assemble stage
    vec_src: np.ndarray | None = None  # old id of each previous node whose vector is reused
    new_docs: list = field(default_factory=list)  # the ingested documents (emptied once chunked)
    chunk_rows: list | None = None  # [chunk id, doc id, text] rows, until assembled
    doc_of: dict = field(default_factory=dict)  # doc id -> new document record (no text)

    @property
    def old_n(self) -> int:
        """Nodes that existed before this run (after deletions)."""
        return len(self.vec_src)

    @property
    def segment_start(self) -> int:
        """The first node of the delta segment a delta run writes."""
        kind = self.plan.kind
        return kind.delta_from if isinstance(kind, DeltaInsert) and kind.delta_from is not None else self.old_n


def _digest(obj: Any) -> str:
    return hashlib.blake2b(json.dumps(obj, sort_keys=True, ensure_ascii=False).encode("utf-8"),
                           digest_size=16).hexdigest()


@dataclass(frozen=True)
class _Inputs:
    """The run's documents once ingested: the new ones, the duplicates skipped, the doc ids to drop."""

    new_docs: list
    duplicates: int
    drop: list[int]
    ingest_s: float


def start_run(inputs: Sequence, root: Path, config, *, llm=None, embedder=None, progress: bool = True,
              allow_failures: bool = False, log=None, delete=None, executor=None,
              compact: str | None = None, background: float | None = None) -> "BuildRun | BuildReport":
    """The run to execute, or the report of a run with nothing to do (every document already indexed).

    ``compact``: "merge" recomputes every global stage over every segment into one; "full" also
    re-assembles every document in its original order, as a fresh build does (``noderag compact``).
    ``background``: the ``update.max_delta_share`` of a background compaction (:mod:`noderag.indexing.update.background`),
    which does nothing unless the deltas hold more than that share of the base.
    """
    say = log or (lambda msg: None)
    check_layout(root)
    if background is None:
        _drop_background_stages(root, say)
    previous = open_previous(root, say)
    if previous is None and (delete is not None or compact is not None):
        raise IndexNotFoundError(f"{root}: no finished index to {'delete from' if delete is not None else 'compact'}")
    config = _run_config(config, previous, llm is not None, executor, say)
    idle = _compaction_to_skip(root, previous, config, compact, background, say)
    if idle is not None:
        return idle
    docs_rows = load_documents(previous.path, previous.manifest) if previous is not None else DocumentRows()
    got = _ingest_inputs(inputs, docs_rows, delete, compact, say)
    if not got.new_docs and not got.drop and compact is None:
        if previous is not None:
            say("nothing new to add: every input document is already in the index")
            return BuildReport(0, got.duplicates, previous.manifest, generation=previous.generation)
        raise IngestError(f"no documents found in {', '.join(str(p) for p in inputs)} "
                          "(expected non-empty .txt, .md or .jsonl files)")
    common = dict(root=root, say=say, previous=previous, n_new=len(got.new_docs), duplicates=got.duplicates,
                  ingest_s=got.ingest_s, llm=llm, embedder=embedder, allow_failures=allow_failures)
    rewrite = delete_plan(previous, config, got.drop) if previous is not None and not got.new_docs and compact is None \
        else None
    if got.drop and compact is None and rewrite is None:
        scrub = _scrub_kind(previous, config, got, delete is None, say)
        if scrub is not None:
            _check_previous(previous, delta=True, reads=SCRUB_READS)
            run_id = _digest({"scrub": got.drop, "generation": previous.generation,
                              "run": previous.manifest.get("run_id")})
            _claim_stages(root, run_id, 0, len(got.drop), say)
            return BuildRun(RunPlan(**{**common, "n_new": 0, "duplicates": 0}, config=config, kind=scrub,
                                    run_id=run_id, drop=tuple(got.drop)), Progress(progress))
    kind, nodes = _run_kind(previous, config, got, compact, rewrite, docs_rows, say)
    table, base, traces, docs_rows, vec_src = nodes
    config, language = _embedder_spec(config, previous, got.new_docs, say)
    run_id = _digest({"config": {k: config.to_dict()[k] for k in BUILD_SECTIONS},
                      "docs": [d.content_hash for d in got.new_docs], "base_nodes": len(table),
                      "generation": previous.generation if previous else None, "drop": got.drop,
                      **({"delta": True} if isinstance(kind, DeltaInsert) else {}),
                      **({"compact": compact} if compact is not None else {})})
    _claim_stages(root, run_id, len(got.new_docs), len(got.drop), say, background=background is not None)
    from .heap import release

    # each stage's freed memory goes back (a full collection: not worth it for a delta's few objects)
    journal = Journal(root / "stages" / "state.json", log=log,
                      on_finish=None if isinstance(kind, DeltaInsert) else release)
    first_document = len(docs_rows)  # the id of the run's first new document
    if isinstance(kind, DeltaInsert) and kind.rewrites is not None:  # the re-assembled documents are the new delta's
        first_document = deltas_of(previous.manifest, previous.path)[kind.rewrites].first_document
    plan = RunPlan(**common, config=config, kind=kind, run_id=run_id, drop=tuple(got.drop),
                   first_document=first_document, language=language)
    return BuildRun(plan, Progress(progress), journal, table, base, traces, docs_rows, vec_src, got.new_docs)


def _run_config(config, previous: Previous | None, llm_given: bool, executor, say):
    """The run's configuration, reconciled once with the index's own (an index keeps its build configuration)."""
    given = config
    stored = (previous.manifest.get("config") or {}) if previous else None
    config, notes = NodeRAGConfig.for_run(config, stored, llm_given=llm_given, executor=executor)
    if given is None and previous is not None:  # no configuration given: the index's stored [update] holds
        config = replace(config, update=stored_update(previous.manifest, previous.path))
    for note in notes:
        say(note)
    return config


def _ingest_inputs(inputs: Sequence, docs_rows: DocumentRows, delete, compact: str | None, say) -> _Inputs:
    """Ingest the inputs, skip the documents already indexed, and resolve what is deleted: the deletion's
    documents and every indexed one that a new document of the same source id (other content) replaces."""
    drop = delete.resolve(docs_rows) if delete is not None else []
    t0 = time.perf_counter()
    new_docs, dupes = ingest(inputs, on_skip=say) if compact is None and (inputs or delete is None) else ([], 0)
    if new_docs and len(docs_rows):  # already indexed (the same content): skipped
        known = docs_rows.present("content_hash", [d.content_hash for d in new_docs])
        dupes += sum(known)
        new_docs = [d for d, k in zip(new_docs, known) if not k]
    ingest_s = time.perf_counter() - t0
    drop = sorted(set(drop) | set(docs_rows.doc_ids_where("source", [d.source for d in new_docs])))
    return _Inputs(new_docs, dupes, drop, ingest_s)


def _scrub_kind(previous: Previous, config, got: _Inputs, replacing: bool, say) -> Scrub | None:
    """A delete (or a replacement) of base documents done in place, or None when it recomputes the index."""
    why = scrub_reason(previous, config, got.drop)
    # a replacement of base documents: the old versions scrubbed, then the new ones inserted (as a delta)
    replace_in_place = bool(got.new_docs) and replacing and why is None and \
        delta_reason(previous, config, [], len(got.new_docs)) is None
    if why is None and (not got.new_docs or replace_in_place):  # scrubbed in place (noderag.indexing.update.scrub)
        return Scrub(then_insert=replace_in_place)
    if not got.new_docs:
        say(f"deleting by recomputing the whole index: {why}")
    return None


def _run_kind(previous: Previous | None, config, got: _Inputs, compact: str | None, rewrite: int | None,
              docs_rows: DocumentRows, say):
    """(the run kind, (table, decomposed edges, traces, document rows, vec_src)): the nodes it builds on,
    documents deleted or re-assembled as it needs."""
    reason = (f"compaction ({compact})" if compact is not None else None if rewrite is not None
              else delta_reason(previous, config, got.drop, len(got.new_docs)))
    if previous is not None and reason is not None and (deltas_of(previous.manifest, previous.path) or
                                                        (got.new_docs and not got.drop and config.update.segments)):
        say(f"recomputing the whole index: {reason}")
    if rewrite is not None:  # a delete inside the deltas: they are rewritten, the rest stays
        _check_previous(previous, delta=True)
        table, base, traces, segments, docs_rows, vec_src, delta_from = rewrite_deltas(previous, rewrite, got.drop,
                                                                                       docs_rows)
        return DeltaInsert(tuple(segments), delta_from, rewrite), (table, base, traces, docs_rows, vec_src)
    # a segmented build's duplicate nodes (store.aliases) become one node only where documents are re-assembled
    aliased = previous is not None and has_aliases(previous.path)
    if reason is None:
        kind = DeltaInsert()
    elif compact is not None:
        kind = Compaction("full" if aliased else compact)
    elif previous is None:
        kind = FreshBuild()
    else:
        kind = Recompute(reason, reassembles=bool(got.drop) or aliased)
    table, base, traces, segments = _previous_nodes(previous, isinstance(kind, DeltaInsert),
                                                    need_edges=not kind.reassembles)
    if isinstance(kind, DeltaInsert):  # an insert as a delta: on the query tables of the segments
        kind = DeltaInsert(tuple(segments))
    vec_src = np.arange(len(table), dtype=np.int64)
    if len(table):  # nodes a delete in place scrubbed keep their ids but have no stored vector after a compaction
        vec_src[~table.active_array()] = -1
    if kind.reassembles:  # re-assembled in their original order, numbered as a fresh build numbers them
        from .update.survivors import reassemble_survivors

        table, docs_rows, base, traces, vec_src = reassemble_survivors(table, docs_rows, traces, set(got.drop))
        if isinstance(kind, Compaction):  # every vector embedded again: stored ones are quantised, a fresh build's are not
            vec_src = np.zeros(0, np.int64)
    return kind, (table, base, traces, docs_rows, vec_src)


def _embedder_spec(config, previous: Previous | None, new_docs: list, say):
    """(the configuration with ``embed.spec`` "auto" resolved from the corpus for a new index, what it saw)."""
    language = (previous.manifest.get("embedder", {}).get("auto") if previous is not None else None)
    if config.embed.spec == "auto":  # a new index: choose the embedder from the corpus (noderag.lang)
        from ..embed import resolve_auto_spec

        spec, language = resolve_auto_spec(d.text for d in new_docs)
        config = config.with_overrides({"embed.spec": spec})
        say(f"embed.spec auto: {spec} ({language['chinese_documents']} of {language['documents']} documents Chinese)")
    return config, language


def _compaction_to_skip(root: Path, previous, config, compact: str | None, background: float | None,
                        say) -> BuildReport | None:
    """The report of a compaction that does nothing (None: go on): a background one that is not due or finds a
    user's unfinished run in ``stages/`` (its writer's to resume), or one with nothing to compact."""
    if compact is None:
        return None
    unchanged = BuildReport(0, 0, previous.manifest, generation=previous.generation)
    if background is None:
        idle = nothing_to_compact(previous, compact)
        if idle is not None:
            say(f"nothing to compact: {idle}")
            return replace(unchanged, nothing_done=idle)
        return None
    pending = _pending_run(root)
    if pending is not None and not pending.get("background"):
        say(f"no background compaction: {_what_was_pending(pending)} is unfinished in {root / 'stages'}")
        return unchanged
    if not background_compaction_due(previous.manifest, previous.path, replace(
            config, update=replace(config.update, max_delta_share=background, compaction="background"))):
        say(f"no compaction due: the deltas hold at most update.max_delta_share = {background} of the base")
        return unchanged
    return None


#: What a delta run reads whole of each segment of the generation it builds on (paths relative to the segment;
#: checked byte for byte first): the node types and active flags its scopes follow from, and the keys of a
#: segment without stored sorted keys (bucketed in memory). Of the keys, texts, names, document and chunk ids
#: and BM25 postings it reads the few rows it looks up.
DELTA_READS = (NODE_TYPES, f"{QUERY_DIR}/active.npy", f"{QUERY_DIR}/meta.json", SCRUBBED, SCRUBBED_KEYS)


#: What a scrubbing delete (:mod:`noderag.indexing.update.scrub`) reads whole of the base and rewrites, checked byte for byte
#: first (a damaged file rewritten would get a new checksum: the damage would no longer show). Of the text pages it
#: checks the ones it rewrites, once it knows them (``noderag.indexing.update.scrub.write_scrubbed``).
SCRUB_READS = (NODE_TYPES, NODE_KEYS, NODES, DOCUMENTS, DECOMPOSITIONS, LINKED, COMMUNITIES, SCRUBBED, SCRUBBED_KEYS,
               "graph/", "semantic/", NODE_TEXT_OFF, f"{QUERY_DIR}/doc.npy", f"{QUERY_DIR}/meta.json") + \
    tuple(f"{QUERY_DIR}/{k}.npy" for k in SCRUBBED_TABLES)


def delta_reads(manifest: dict, path: Path | None = None) -> tuple[str, ...]:
    """The files of the generation at ``path`` that a delta insert reads whole: :data:`DELTA_READS` of the
    base and of each delta, and the keys of the segments that store no sorted keys."""
    from .key_index import stores_sorted_keys

    prefixes = [""] + [f"{DELTAS}/{d['name']}/" for d in manifest.get(DELTAS) or []]
    out = []
    for p in prefixes:
        out += [p + name for name in DELTA_READS]
        if path is None or not stores_sorted_keys(path / p):
            out.append(p + NODE_KEYS)
    return tuple(out)


def _previous_nodes(previous: Previous | None, delta: bool, need_edges: bool = True):
    """(node table, decomposed edges, chunk traces, segments' query tables) the run builds on.

    A delta run needs only the existing nodes' keys, types and texts (no edges, no traces: its segment
    holds what it adds); a run that recomputes the index needs everything, checked byte for byte first.
    """
    if previous is None:
        return NodeTable(), EdgeList(), [], []
    _check_previous(previous, delta)
    if delta:
        table, segments = delta_table(segment_folders(previous.path, previous.manifest))
        return table, EdgeList(), [], segments
    table, _, traces = load_tables(previous.path, previous.manifest)
    base = load_base(previous.path, previous.manifest) if need_edges else EdgeList()  # a delete re-assembles them
    return table, base, traces, []


def _check_previous(previous: Previous, delta: bool, reads: tuple[str, ...] | None = None) -> None:
    """An insert must not build on damaged files: a full run reads every file, so it checks every byte; a
    delta reads whole only the node arrays (checked byte for byte here), looks up a few rows of the texts,
    names and BM25 postings, and shares every file as it is, checksums included, so damage anywhere stays
    as visible to `noderag verify` as before. Checking only what it reads whole keeps an insert's cost
    independent of the size of the texts."""
    from ..store.verify import check_files, verify_index

    verify_index(previous.path, "cheap" if delta else "full", manifest=previous.manifest)
    if delta:
        check_files(previous.path, previous.manifest,
                    reads if reads is not None else delta_reads(previous.manifest, previous.path))


#: The rule for what an unfinished run leaves (``docs/integrity.md``), in one line.
STAGES_RULE = ("stages/ belong to one run: a rerun of that run resumes them; any other writer, and `noderag repair`, "
               "discards them first (they were never committed: the index stays its last committed generation)")


def _pending_run(root: Path) -> dict | None:
    """``stages/run.json`` of the unfinished run there ({} when stages/ exists without a readable one; None: none)."""
    stages = root / "stages"
    if not stages.exists():
        return None
    try:
        run = json.loads((stages / "run.json").read_text("utf-8"))
    except (OSError, ValueError):
        return {}
    return run if isinstance(run, dict) else {}


def _what_was_pending(run: dict) -> str:
    """'an insert of 3 document(s)', 'a compaction', ... of a pending ``run.json``."""
    if run.get("background"):
        return "a background compaction"
    docs, drop = int(run.get("n_docs") or 0), int(run.get("drop") or 0)
    if docs and drop:
        return f"a run adding {docs} and deleting or replacing {drop} document(s)"
    if docs:
        return f"a build or insert of {docs} document(s)"
    if drop:
        return f"a delete of {drop} document(s)"
    return "a compaction" if run.get("run_id") else "a run"


def _claim_stages(root: Path, run_id: str, n_docs: int, n_drop: int, say, *, background: bool = False) -> None:
    """Record the run in ``stages/run.json``; resume the pending run there if it is this one, else discard it
    (:data:`STAGES_RULE`)."""
    from ..store.generations import discard_stages

    stages = root / "stages"
    pending = _pending_run(root)
    if pending is not None and pending.get("run_id") == run_id:
        say("resuming the unfinished build")
        return
    if pending is not None:
        discard_stages(root)
        say(f"discarded the unfinished {_what_was_pending(pending)} left in {stages} (never committed; "
            "rerun it to redo it)")
    stages.mkdir()
    atomic_write_json(stages / "run.json", {"run_id": run_id, "n_docs": n_docs, "drop": n_drop,
                                            **({"background": True} if background else {})})


def _drop_background_stages(root: Path, say) -> None:
    """Discard what a stopped background compaction left in ``stages/`` (the next one starts over)."""
    stages = root / "stages"
    try:
        pending = json.loads((stages / "run.json").read_text("utf-8"))
    except (OSError, ValueError):
        return
    if isinstance(pending, dict) and pending.get("background") is True:
        say("dropping the unfinished stages of a stopped background compaction")
        shutil.rmtree(stages, ignore_errors=True)


def documents_without_text(run: BuildRun) -> dict:
    """doc id -> document record of the run's new documents, texts dropped (they live on in the chunks)."""
    first = len(run.docs_rows)
    return {first + i: replace(d, text="") for i, d in enumerate(run.new_docs)}

