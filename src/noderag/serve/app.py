"""The FastAPI application: endpoints, request guards (API key, body size) and error bodies.

``create_app(index)`` opens the index once, prepares one :class:`~noderag.search.Searcher` and a
:class:`~noderag.serve.worker.RetrievalWorker`, and returns the ASGI app. Every error answers
``{"error": ..., "field": ...}`` with a 4xx naming the field (never a traceback or a file path);
unexpected errors are logged on the server and answered with a plain 500.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import os
import time
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from fastapi.staticfiles import StaticFiles
from starlette.exceptions import HTTPException as StarletteHTTPException

from .._version import __version__
from ..store.errors import fd_exhaustion
from ..search import SearchConfig, Searcher
from .models import (AnswerOut, AnswerRequest, ErrorOut, HealthOut, Limits, NodeOut, RetrievalOut,
                     RetrieveManyOut, RetrieveManyRequest, RetrieveRequest, StatsOut)
from .reload import Generation, GenerationWatcher, LiveGeneration
from .stream import answer_events, sse
from .views import GraphView, NodeNotFound
from .worker import RetrievalWorker, Timing

__all__ = ["create_app", "ServeSettings", "STATIC_DIR"]

log = logging.getLogger("noderag.serve")
STATIC_DIR = Path(__file__).with_name("static")
_PUBLIC = ("/", "/static/")  # the page's files: served without the API key


@dataclass
class ServeSettings:
    """Server settings.

    Attributes
    ----------
    api_key : str or None
        When set, every request except the page's static files must send it
        (``Authorization: Bearer KEY`` or ``X-API-Key: KEY``).
    max_body_bytes : int
        Larger request bodies get a 413 without being read.
    max_batch : int
        Most queued queries the worker embeds in one call.
    retrieve_batch : int
        Most embedded queries per ``retrieve_many`` call (each part answered when done).
    max_pending : int or None
        The embedder waits while this many embedded queries wait for the search stage (None: ``retrieve_batch``).
    embed_threads : int or None
        Parallel ONNX runs of the query embedder (None: the embedder's own default, all cores up to 8). 1 by
        default: the embedding stage keeps to one core and the search stage and the event loop have the
        rest (with 2 on the 2-core machine the search thread was preempted in 99.7% of its calls,
        ``benchmarks/results/serve.md``).
    reload_s : float or None
        Check every ``reload_s`` seconds whether a writer committed a new index generation, and serve it
        without a restart (None: keep the generation opened at start).
    llm_spec : str or None
        Shown by ``/stats`` (the backend itself is passed to :func:`create_app`).
    """

    api_key: str | None = None
    max_body_bytes: int = Limits.max_body_bytes
    max_batch: int = 2
    retrieve_batch: int = 2
    max_pending: int | None = None
    embed_threads: int | None = 1
    reload_s: float | None = 1.0
    llm_spec: str | None = None


def _error(status: int, message: str, field: str | None = None, headers: dict | None = None) -> JSONResponse:
    return JSONResponse({"error": message, "field": field}, status_code=status, headers=headers)


class _Guard:
    """ASGI middleware: API key on everything but the page's files, and a request-body size limit."""

    def __init__(self, app: Any, *, api_key: str | None, max_body_bytes: int) -> None:
        self.app = app
        self.key = api_key.encode() if api_key else None
        self.max_body = max_body_bytes

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope.get("path", "")
        headers = dict(scope.get("headers") or [])
        if self.key is not None and not (path == "/" or path.startswith("/static/")):
            given = headers.get(b"x-api-key")
            auth = headers.get(b"authorization", b"")
            if given is None and auth[:7].lower() == b"bearer ":
                given = auth[7:].strip()
            if given is None or not hmac.compare_digest(given, self.key):
                why = "missing API key" if given is None else "wrong API key"
                await _error(401, f"{why}: send it as 'Authorization: Bearer KEY' or 'X-API-Key: KEY'",
                             "header.authorization", {"WWW-Authenticate": "Bearer"})(scope, receive, send)
                return
        if scope.get("method") not in ("POST", "PUT", "PATCH"):
            await self.app(scope, receive, send)
            return
        limit = self.max_body
        declared = headers.get(b"content-length")
        if declared is not None:
            try:
                n = int(declared)
            except ValueError:
                await _error(400, "the Content-Length header is not a number", "header.content-length")(
                    scope, receive, send)
                return
            if n > limit:
                await _error(413, f"request body of {n} bytes is over the limit of {limit} bytes",
                             "body")(scope, receive, send)
                return
        chunks: list[bytes] = []
        size = 0
        while True:  # bodies are small: read it all (bounded), then replay it to the app
            msg = await receive()
            if msg["type"] == "http.disconnect":
                return
            chunk = msg.get("body", b"")
            size += len(chunk)
            if size > limit:
                await _error(413, f"request body is over the limit of {limit} bytes", "body")(scope, receive, send)
                return
            chunks.append(chunk)
            if not msg.get("more_body", False):
                break
        body = b"".join(chunks)
        replayed = False

        async def replay() -> dict:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)


def _field(loc: tuple | list) -> str:
    parts = [str(p) for p in loc]
    if parts and parts[0] == "body":
        parts = parts[1:]
        prefix = ""
    elif parts and parts[0] in ("path", "query", "header"):
        prefix = parts[0] + "."
        parts = parts[1:]
    else:
        prefix = ""
    out = ""
    for p in parts:
        out += f"[{p}]" if p.isdigit() else (f".{p}" if out else p)
    return prefix + out if out else (prefix.rstrip(".") or "body")


def _message(err: dict, allowed: dict[str, list[str]]) -> tuple[str, str]:
    """One readable message for one pydantic error, without echoing the input."""
    loc = tuple(err.get("loc") or ())
    kind = err.get("type", "")
    field = _field(loc)
    msg = str(err.get("msg", "invalid value"))
    if msg.startswith("Value error, "):
        msg = msg[len("Value error, "):]
        return msg, field
    if loc == ("body",) and kind in ("model_attributes_type", "dict_type", "model_type"):
        names = allowed.get("body") or []
        return "the request body must be a JSON object" + (f" with the fields {', '.join(names)}" if names else ""), \
            "body"
    if kind == "json_invalid":
        pos = loc[1] if len(loc) > 1 else None
        why = (err.get("ctx") or {}).get("error", "invalid JSON")
        return f"the request body is not valid JSON ({why}{f' at character {pos}' if pos is not None else ''})", \
            "body"
    if kind == "missing":
        return (f"field '{field}' is required" if field != "body" else "a JSON request body is required"), field
    if kind == "extra_forbidden":
        names = allowed.get("body") or []
        return f"unknown field '{field}'" + (f"; allowed fields: {', '.join(names)}" if names else ""), field
    inp = err.get("input")
    got = ""
    if isinstance(inp, str) and kind.startswith("string_too"):
        got = f" (got {len(inp)} characters)"
    elif isinstance(inp, (list, tuple)) and kind.startswith("too_"):
        got = f" (got {len(inp)} items)"
    elif isinstance(inp, (int, float)) and not isinstance(inp, bool):
        got = f" (got {inp})"
    return f"{field}: {msg}{got}", field


def create_app(index: Any, *, llm: Any = None, settings: ServeSettings | None = None,
               search_config: SearchConfig | None = None, embedder: Any = None) -> FastAPI:
    """The ASGI app serving ``index`` (a directory or an opened store).

    Parameters
    ----------
    index : path or IndexStore
    llm : LLM backend or None
        Needed by ``/answer`` (without one it answers 400: only retrieval is available).
    settings : ServeSettings or None
    search_config : SearchConfig or None
        Query-time search settings (default: the current defaults, as ``noderag query``).
    embedder : Embedder or None
        Overrides the index's embedder (tests).
    """
    served = _serving(index, llm=llm, settings=settings or ServeSettings(), search_config=search_config,
                      embedder=embedder)
    worker, live, watcher, settings = served.worker, served.live, served.watcher, served.settings

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        yield
        if watcher is not None:
            watcher.close()
        worker.close()

    app = FastAPI(title="noderag", version=__version__, lifespan=lifespan, docs_url=None, redoc_url=None,
                  description="Retrieval and answers over one NodeRAG index. Errors are "
                              "`{\"error\": message, \"field\": field}` with a 4xx status.")
    app.state.worker = worker
    app.state.live = live
    app.state.watcher = watcher
    app.state.settings = settings

    _add_error_handlers(app, served.counters)
    _add_retrieval_routes(app, served)
    _add_index_routes(app, served)
    app.mount("/static", StaticFiles(directory=STATIC_DIR), name="static")
    app.add_middleware(_Guard, api_key=settings.api_key, max_body_bytes=settings.max_body_bytes)
    return app


@dataclass
class _Served:
    """What the routes share: the retrieval worker, the live generation, its watcher, settings, counters."""

    worker: Any
    live: Any
    watcher: Any
    settings: "ServeSettings"
    counters: dict


#: error responses every route documents
_ERR_RESPONSES = {400: {"model": ErrorOut}, 401: {"model": ErrorOut}, 413: {"model": ErrorOut},
                  422: {"model": ErrorOut}}


def _serving(index: Any, *, llm: Any, settings: "ServeSettings", search_config: Any, embedder: Any) -> _Served:
    """Open the index, warm its searcher up, and start the retrieval worker and the generation watcher."""
    from ..store.tables import IndexStore

    settings = settings or ServeSettings()
    store = IndexStore.open(index) if isinstance(index, (str, os.PathLike)) else index
    searcher = Searcher(store, search_config, llm=llm, embedder=embedder)
    emb = searcher.embedder
    if settings.embed_threads is not None and hasattr(emb, "n_threads"):
        emb.n_threads = settings.embed_threads  # the embedding stage's share of the cores
    warm_vec = searcher.embed(["warm-up question"])  # load the embedding model now, not on a request
    searcher.retrieve_many(["warm-up question"], query_vectors=warm_vec)  # and compile the kernels

    def prepare(new_store: Any) -> Generation:
        """Searcher and views of another generation; the embedding model is shared, not reloaded."""
        s = Searcher(new_store, search_config, llm=llm, embedder=emb)
        s.retrieve_many(["warm-up question"], query_vectors=warm_vec)
        return Generation(new_store, s, GraphView(new_store))

    # the generation being served (swapped whole); each request holds the one it uses, and a superseded
    # generation is closed (pin released, searcher dropped) when its last request is done
    live = LiveGeneration(Generation(store, searcher, GraphView(store)))
    worker = RetrievalWorker(searcher, max_batch=settings.max_batch, retrieve_batch=settings.retrieve_batch,
                             max_pending=settings.max_pending, context=live.current)

    def swap(gen: Generation) -> None:
        live.swap(gen, between=lambda: worker.swap(gen.searcher, gen))  # new batches first, then retire

    watcher = None
    if settings.reload_s and getattr(store, "root", None) is not None:
        watcher = GenerationWatcher(store.root, lambda: live.current, prepare, swap, interval_s=settings.reload_s)
    return _Served(worker, live, watcher, settings, {"requests": 0, "errors": 0, "started": time.time()})


def _add_error_handlers(app: FastAPI, counters: dict) -> None:
    """Every error as ``{"error": message, "field": field}`` with its status (and counted)."""
    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = list(exc.errors())
        counters["errors"] += 1
        route = request.scope.get("route")
        model = {"/retrieve": RetrieveRequest, "/retrieve_many": RetrieveManyRequest,
                 "/answer": AnswerRequest}.get(getattr(route, "path", ""))
        names = {"body": list(model.model_fields) if model else []}
        msgs = [_message(e, names) for e in errors[:5]]
        status = 400 if any(e.get("type") == "json_invalid" for e in errors) else 422
        return _error(status, "; ".join(m for m, _ in msgs), msgs[0][1] if msgs else None)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        counters["errors"] += 1
        if exc.status_code == 404 and exc.detail == "Not Found":
            msg = f"no such endpoint: {request.method} {request.url.path}"
        elif exc.status_code == 405:
            msg = f"method {request.method} is not allowed on {request.url.path}"
        else:
            msg = str(exc.detail)
        return _error(exc.status_code, msg, None, getattr(exc, "headers", None))

    @app.exception_handler(Exception)
    async def _crash(request: Request, exc: Exception) -> JSONResponse:
        counters["errors"] += 1
        out_of_fds = fd_exhaustion(exc, "noderag serve", "an index file")
        if out_of_fds is not None:  # the server's limit, not the request's fault nor the index's: try again later
            log.error("%s", out_of_fds)
            return _error(503, "the server has too many open files (its ulimit -n); try again later", None,
                          {"Retry-After": "5"})
        log.exception("unexpected error on %s %s", request.method, request.url.path)
        return _error(500, "internal error (logged on the server)")


def _add_retrieval_routes(app: FastAPI, served: _Served) -> None:
    """POST /retrieve, /retrieve_many and /answer, through the batching retrieval worker."""
    worker, live, counters = served.worker, served.live, served.counters

    def encode(k: int | None, explain: bool) -> Callable[[Any, Generation], tuple[Any, bytes]]:
        def finish(res: Any, gen: Generation) -> tuple[Any, bytes]:  # gen: the generation that retrieved res
            return res, json.dumps(_result_dict(res, gen.view, k, explain), ensure_ascii=False).encode()
        return finish

    async def run_one(question: str, k: int | None, explain: bool) -> tuple[Any, bytes, Timing]:
        (res, body), timing = await asyncio.wrap_future(worker.submit(question, encode(k, explain)))
        return res, body, timing

    @app.post("/retrieve", response_model=RetrievalOut, responses=_ERR_RESPONSES, tags=["retrieval"])
    async def retrieve(req: RetrieveRequest) -> Response:
        """Retrieve for one question: nodes, ranked passages, context and citations (`noderag query --json`)."""
        t0 = time.perf_counter()
        counters["requests"] += 1
        _, body, timing = await run_one(req.question, req.k, req.explain)
        return Response(body, media_type="application/json",
                        headers=server_timing(timing, time.perf_counter() - t0))

    @app.post("/retrieve_many", response_model=RetrieveManyOut, responses=_ERR_RESPONSES, tags=["retrieval"])
    async def retrieve_many(req: RetrieveManyRequest) -> Response:
        """Retrieve for several questions in one batch; `results` in question order."""
        counters["requests"] += 1
        futs = worker.submit_many(req.questions, encode(req.k, False))
        done = await asyncio.gather(*(asyncio.wrap_future(f) for f in futs))
        body = b'{"results": [' + b", ".join(b for (_, b), _ in done) + b"]}"
        return Response(body, media_type="application/json")

    @app.post("/answer", response_model=AnswerOut, responses={
        **_ERR_RESPONSES, 200: {"description": "with `stream` (the default): `text/event-stream` events "
                                              "`retrieval` (as /retrieve with explain), `token` ({text}), "
                                              "`answer` ({answer, cited_ids, error, usage}), `done`; "
                                              "without: the JSON of `noderag query --answer --json`",
                               "content": {"text/event-stream": {}}}}, tags=["answer"])
    async def answer(req: AnswerRequest) -> Response:
        """Retrieve, then answer with the configured LLM (400 when the server has none)."""
        counters["requests"] += 1
        if live.current.searcher.llm is None:
            counters["errors"] += 1
            return _error(400, "no LLM is configured on this server, so only retrieval is available: use POST "
                               "/retrieve, or restart the server with --llm SPEC", "llm")
        res, body, _ = await run_one(req.question, req.k, req.stream or req.explain)
        if not req.stream:
            gen = live.acquire()  # the answer may read node texts: hold a generation while it runs
            try:
                out = await asyncio.to_thread(gen.searcher.answer, req.question, retrieval=res)
            finally:
                gen.release()
            d = out.to_dict()
            d["retrieval"] = json.loads(body)
            return JSONResponse(d)
        searcher_llm = live.current.searcher.llm

        async def events():
            yield b"event: retrieval\ndata: " + body + b"\n\n"
            try:
                async for kind, data in answer_events(searcher_llm, req.question, res):
                    yield sse(kind, data)
            except Exception:  # noqa: BLE001 - the stream has started: report in-band, log the details
                log.exception("answer stream failed")
                yield sse("error", {"error": "the answer failed (logged on the server)"})
            yield sse("done", {})

        return StreamingResponse(events(), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})


def _add_index_routes(app: FastAPI, served: _Served) -> None:
    """GET /nodes/{id}, /stats, /health and the page."""
    worker, live, watcher, settings, counters = served.worker, served.live, served.watcher, served.settings, served.counters

    @app.get("/nodes/{node_id}", response_model=NodeOut, responses={404: {"model": ErrorOut}, **_ERR_RESPONSES},
             tags=["graph"])
    async def node(node_id: int) -> JSONResponse:
        """One node: text, type, source passage and neighbours (first 50, by type)."""
        counters["requests"] += 1
        gen = live.acquire()
        try:
            return JSONResponse(gen.view.node(node_id))
        except NodeNotFound as exc:
            counters["errors"] += 1
            return _error(404, str(exc), "path.node_id")
        finally:
            gen.release()

    @app.get("/stats", response_model=StatsOut, responses=_ERR_RESPONSES, tags=["index"])
    async def stats() -> JSONResponse:
        """Index counts and server counters."""
        gen = live.acquire()
        try:
            searcher, m = gen.searcher, gen.store.manifest
        finally:
            gen.release()
        return JSONResponse({"generation": gen.number,
            "counts": m.get("counts", {}), "bytes_total": m.get("bytes_total"),
            "llm": (settings.llm_spec or getattr(searcher.llm, "model_id", "configured"))
            if searcher.llm is not None else None,
            "server": {"requests": counters["requests"], "errors": counters["errors"], "batches": worker.batches,
                       "queries": worker.queries, "max_batch": worker.max_batch,
                       "retrieve_batch": worker.retrieve_batch, "max_pending": worker.max_pending,
                       "embed_batches": worker.embed_batches,
                       "generation_reloads": watcher.reloads if watcher is not None else None,
                       "uptime_s": round(time.time() - counters["started"], 1),
                       "limits": {"max_question_chars": Limits.max_question_chars,
                                  "max_questions": Limits.max_questions, "max_k": Limits.max_k,
                                  "max_body_bytes": settings.max_body_bytes}},
        })

    @app.get("/health", response_model=HealthOut, responses=_ERR_RESPONSES, tags=["index"])
    async def health() -> dict:
        """Liveness: the index is open."""
        gen = live.acquire()
        try:
            return {"status": "ok", "nodes": gen.view.n, "llm": gen.searcher.llm is not None, "generation": gen.number}
        finally:
            gen.release()

    @app.get("/", include_in_schema=False)
    async def page() -> Response:
        return Response((STATIC_DIR / "index.html").read_bytes(), media_type="text/html; charset=utf-8")


def server_timing(t: Timing, total_s: float) -> dict[str, str]:
    """Per-request components on the server's clock (ms): the W3C ``Server-Timing`` header.

    queue: waiting for the embedder; embed: its embedding call; handoff: waiting for the search
    stage; search: its ``retrieve_many`` part (search_cpu: the search thread's CPU time in it, search_preempted: times the OS
    took its core meanwhile); serialise: its JSON encoding; total: the endpoint's
    whole time (the rest is request hand-over to and from the event loop).
    """
    return {"Server-Timing": f"queue;dur={t.queue_s * 1e3:.3f}, embed;dur={t.embed_s * 1e3:.3f}, "
                             f"handoff;dur={t.handoff_s * 1e3:.3f}, search;dur={t.search_s * 1e3:.3f}, "
                             f"search_cpu;dur={t.search_cpu_s * 1e3:.3f}, "
                             f"serialise;dur={t.serialise_s * 1e3:.3f}, total;dur={total_s * 1e3:.3f}, "
                             f"batch;desc=\"{t.batch_size}\", embed_batch;desc=\"{t.embed_batch_size}\", "
                             f"search_preempted;desc=\"{t.search_preempted}\""}


def _result_dict(res: Any, view: GraphView, k: int | None, explain: bool) -> dict[str, Any]:
    """``res.to_dict()`` (the JSON of ``noderag query --json``), passages cut to ``k``, plus ``explain``."""
    d = res.to_dict()
    if k is not None:
        for key in ("passages", "passage_scores", "passage_node_ids"):
            d[key] = d[key][:k]
    if explain:
        ids = [n.id for n in res.nodes]
        d["explain"] = {"edges": view.edges(ids),
                        "seeds": [n.id for n in res.nodes if n.origin in ("entry", "name")],
                        "passage_texts": view.texts(d["passage_node_ids"])}
    return d
