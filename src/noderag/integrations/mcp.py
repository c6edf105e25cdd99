"""``noderag mcp DIR``: an MCP server over one opened index (extra ``mcp``: ``pip install 'noderag[mcp]'``).

Built on the official MCP Python SDK (``mcp.server.mcpserver.MCPServer``). Transports: stdio (the
default: an agent starts ``noderag mcp DIR`` as a subprocess) or streamable HTTP on 127.0.0.1
with ``--http PORT`` (endpoint ``http://127.0.0.1:PORT/mcp``; loopback only, there is no
authentication).

Tools:

- ``retrieve(question, k=5)``: the ``k`` best passages (id, text, title, score), the typed context
  and the retrieved nodes of ``Index.retrieve``;
- ``retrieve_many(questions, k=5)``: the same for up to 64 questions in one batch (one embedding
  call, one multi-threaded PPR call);
- ``get_node(id)``: one node's text, type, source passage and neighbours (first 50 by type, then id);
- ``answer(question)``: an LLM answer citing node ids; listed only when an LLM is configured
  (``--llm SPEC`` or the index's ``llm.spec``).

Resource ``noderag://stats``: the index's generation, counts, bytes and stage times (JSON).

A malformed call (missing or mistyped argument, empty or over-long question, ``k`` out of range, unknown
node id) is answered with a tool error whose text names the argument; the server keeps serving. Arguments are
strict: ``k: "5"``, ``k: true`` and ``id: "5"`` are refused, not coerced. Over stdio every malformed line, batch
array or lone surrogate gets a JSON-RPC error reply (:mod:`noderag.integrations.mcp_stdio`).

The server follows the index's live generation as ``noderag serve`` does (:mod:`noderag.serve.reload`): a
writer's new generation is served within a second, and a superseded one is closed (files, maps, caches) as
soon as no call uses it, so ``noderag gc`` can remove it. The SDK is imported only when the server is created.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
from contextlib import contextmanager
from typing import Any

__all__ = ["create_server", "add_mcp_arguments", "run_mcp", "MAX_K", "MAX_QUESTIONS", "MAX_QUESTION_CHARS"]

MAX_K = 100
MAX_QUESTIONS = 64
#: The longest question (characters), as ``noderag serve`` allows.
MAX_QUESTION_CHARS = 2000
STATS_URI = "noderag://stats"


def _sdk():
    try:
        from mcp.server.mcpserver import MCPServer
    except ImportError:
        raise ImportError("noderag mcp needs the MCP Python SDK: pip install 'noderag[mcp]'") from None
    return MCPServer


def _question(value: Any, name: str = "question") -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{name}: expected a non-empty string")
    if len(value) > MAX_QUESTION_CHARS:
        raise ValueError(f"{name}: at most {MAX_QUESTION_CHARS} characters, got {len(value)}")
    return value


def _k(k: Any) -> int:
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= MAX_K:
        raise ValueError(f"k: expected an integer from 1 to {MAX_K}, got {k!r}")
    return k


def _payload(index: Any, result: Any, k: int, config: Any) -> dict[str, Any]:
    from .passages import passages

    ranked = passages(index, result, k, config=config)
    keep = ("passage_id", "node_id", "doc_id", "title", "score", "rank")
    return {"query": result.query, "matched": bool(result.matched), "generation": result.generation,
            "passages": [{**{key: p["metadata"][key] for key in keep}, "text": p["text"]} for p in ranked],
            "context": result.context, "context_tokens": int(result.context_tokens),
            "nodes": [n.to_dict() for n in result.nodes]}


def create_server(index: Any, *, llm: Any = None, search_config: Any = None, name: str = "noderag",
                  follow: bool = True):
    """The MCP server (an ``MCPServer``) of an opened index; ``llm`` (a backend) adds the ``answer`` tool.

    ``follow``: serve each generation a writer commits (the one opened first is closed once superseded)."""
    MCPServer = _sdk()
    from mcp.server.mcpserver.exceptions import ToolError

    from .._version import __version__
    from ..serve.views import NodeNotFound

    from .passages import open_index

    live, watcher = _live_generation(open_index(index), follow)

    config = search_config
    server = MCPServer(name, version=__version__, instructions=_instructions(llm is not None), log_level="WARNING")

    @server.tool(description="Retrieve the k best source passages, the typed context and the retrieved nodes "
                             f"for one question (k from 1 to {MAX_K}, default 5).")
    @_strict
    def retrieve(question: str, k: int = 5) -> dict[str, Any]:
        try:
            _question(question)
            _k(k)
        except ValueError as exc:
            raise ToolError(str(exc)) from None
        with _held(live) as index:
            return _payload(index, index.retrieve(question, config=config), k, config)

    @server.tool(description=f"Retrieve for up to {MAX_QUESTIONS} questions in one batch; one result per "
                             "question, in order (k passages each, default 5).")
    @_strict
    def retrieve_many(questions: list[str], k: int = 5) -> dict[str, Any]:
        try:
            if not questions or len(questions) > MAX_QUESTIONS:
                raise ValueError(f"questions: expected 1 to {MAX_QUESTIONS} questions, got {len(questions)}")
            for i, q in enumerate(questions):
                _question(q, f"questions[{i}]")
            _k(k)
        except ValueError as exc:
            raise ToolError(str(exc)) from None
        with _held(live) as index:
            results = index.retrieve_many(list(questions), config=config)
            return {"results": [_payload(index, r, k, config) for r in results]}

    @server.tool(description="One node by id: its type, text, source passage and neighbours (the first 50, "
                             "by type then id, with neighbour_count the total).")
    @_strict
    def get_node(id: int) -> dict[str, Any]:  # noqa: A002 - the tool's argument is called id
        try:
            with _held(live, whole=True) as gen:
                return _view(gen).node(id)
        except NodeNotFound as exc:
            raise ToolError(f"id: {exc}") from None

    if llm is not None:
        @server.tool(description="Answer one question with the configured LLM over the retrieved context; "
                                 "the answer cites node ids.")
        @_strict
        def answer(question: str) -> dict[str, Any]:
            try:
                _question(question)
            except ValueError as exc:
                raise ToolError(str(exc)) from None
            with _held(live) as index:
                res = index.answer(question, llm=llm, config=config)
            if res.error:
                raise ToolError(f"the LLM gave no answer: {res.error}")
            return {"answer": res.answer, "cited_ids": list(res.cited_ids), "usage": dict(res.usage),
                    "passages": _payload(index, res.retrieval, 5, config)["passages"]}

    @server.resource(STATS_URI, name="stats", description="Index generation, node and edge counts, bytes, "
                                                          "stage times (JSON)", mime_type="application/json")
    def stats() -> str:
        with _held(live) as index:
            return json.dumps(index.stats(), sort_keys=True)

    server.noderag_watcher = watcher  # closed by run_mcp; None when not following
    return server


def _strict(fn):
    """``fn`` with strict argument types for the SDK's validation (put under ``@server.tool``): ``"5"`` or ``true``
    is no integer, ``5`` no string."""
    from pydantic import StrictInt, StrictStr

    strict = {"int": StrictInt, "str": StrictStr, "list[str]": list[StrictStr]}
    fn.__annotations__.update({k: strict[v] for k, v in fn.__annotations__.items() if v in strict})
    return fn


def _live_generation(index: Any, follow: bool):
    """(the live generation, its watcher or None): ``index`` first, then each generation a writer commits."""
    from ..api import Index
    from ..serve.reload import Generation, GenerationWatcher, LiveGeneration

    live = LiveGeneration(Generation(index, None, None))
    if not follow:
        return live, None
    watcher = GenerationWatcher(index.root, lambda: live.current, lambda store: Generation(store, None, None),
                                live.swap, interval_s=1.0, opener=Index.open)
    return live, watcher


@contextmanager
def _held(live, whole: bool = False):
    """The live generation's index (``whole``: the generation), held for one call (a writer's switch meanwhile
    closes it only after)."""
    gen = live.acquire()
    try:
        yield gen if whole else gen.store
    finally:
        gen.release()


_VIEW_LOCK = threading.Lock()


def _view(gen):
    """The generation's node view (it reads the node table: prepared on the first ``get_node``, not at start-up)."""
    from ..serve.views import GraphView

    with _VIEW_LOCK:
        if gen.view is None:
            gen.view = GraphView(gen.store)
        return gen.view


def _instructions(answers: bool) -> str:
    return ("Retrieval over a noderag index (a graph of text chunks, semantic units, entities, relationships, "
            "attributes, high-level elements and overviews). Use retrieve for one question, retrieve_many for "
            "several, get_node to look at a node id from a result" + (", answer for an LLM answer." if answers
                                                                       else "."))


def add_mcp_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the ``noderag mcp`` arguments to ``parser``."""
    parser.add_argument("index", metavar="DIR", help="index directory built by `noderag build`")
    parser.add_argument("--http", type=int, metavar="PORT", default=None,
                        help="serve streamable HTTP on 127.0.0.1:PORT/mcp instead of stdio")
    parser.add_argument("--llm", metavar="SPEC", default=None,
                        help="LLM backend of the answer tool (default: the index's llm.spec; none: no answer tool)")
    parser.add_argument("--llm-option", action="append", metavar="KEY=VALUE", default=None,
                        help="LLM backend setting, repeatable (dialect, timeout_s, temperature, ...)")
    parser.add_argument("--config", metavar="FILE", default=None,
                        help="TOML/YAML file whose [search] table overrides the search defaults")


def run_mcp(args: argparse.Namespace) -> int:
    """Open the index, build the server, serve on stdio or HTTP until the client or a signal stops it."""
    try:
        _sdk()
    except ImportError as exc:
        print(f"noderag mcp: error: {exc}", file=sys.stderr)
        return 1
    if args.http is not None and not 1 <= args.http <= 65535:
        print(f"noderag mcp: error: --http must be a port from 1 to 65535, got {args.http}", file=sys.stderr)
        return 1
    from ..api import Index

    index = Index.open(args.index)
    config = None
    if args.config:
        from ..config import load_config

        config = load_config(args.config).search
    spec = args.llm or getattr(getattr(index.config, "llm", None), "spec", None)
    llm = None
    if spec:
        from ..llm.options import OptionError
        from ..search.api import index_llm

        try:
            llm = index_llm(index, spec, args.llm_option)
        except (OptionError, ValueError, TypeError) as exc:
            print(f"noderag mcp: error: {exc}", file=sys.stderr)
            return 1
    server = create_server(index, llm=llm, search_config=config)
    where = f"http://127.0.0.1:{args.http}/mcp" if args.http is not None else "stdio"
    print(f"noderag mcp: {where} ({index.graph.n:,} nodes; answer tool: {spec if llm else 'off'})",
          file=sys.stderr, flush=True)
    del index  # the server holds the generation now, and lets go of it once a newer one is served
    try:
        if args.http is None:
            import anyio

            from .mcp_stdio import run_stdio

            anyio.run(run_stdio, server)
        else:
            server.run("streamable-http", host="127.0.0.1", port=args.http)
    except KeyboardInterrupt:
        pass
    finally:
        if server.noderag_watcher is not None:
            server.noderag_watcher.close()
    return 0
