"""``noderag serve DIR``: argument wiring and start-up (called from ``noderag.cli``)."""

from __future__ import annotations

import argparse
import ipaddress
import os
import socket
import sys

__all__ = ["add_serve_arguments", "run_serve"]

API_KEY_ENV = "NODERAG_SERVE_API_KEY"


def add_serve_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the ``noderag serve`` arguments to ``parser``."""
    parser.add_argument("index", metavar="DIR", help="index directory built by `noderag build`")
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)")
    parser.add_argument("--port", type=int, default=8000, help="TCP port (default 8000; 0 = any free port)")
    parser.add_argument("--llm", metavar="SPEC", default=None,
                        help="LLM backend for POST /answer (default: the index's llm.spec; without one: retrieval only)")
    parser.add_argument("--llm-option", action="append", metavar="KEY=VALUE", default=None,
                        help="LLM backend setting, repeatable (dialect, timeout_s, temperature, ...)")
    parser.add_argument("--api-key", metavar="KEY", default=None,
                        help=f"require this key on every request but the page's files (or set ${API_KEY_ENV})")
    parser.add_argument("--config", metavar="FILE", default=None,
                        help="TOML/YAML file whose [search] table overrides the search defaults")
    parser.add_argument("--max-batch", type=int, default=2, metavar="N",
                        help="most queued questions embedded in one call (default 2)")
    parser.add_argument("--retrieve-batch", type=int, default=2, metavar="N",
                        help="most embedded questions per retrieval call; each part is answered when done "
                             "(default 2)")
    parser.add_argument("--max-pending", type=int, default=None, metavar="N",
                        help="the embedder waits while N embedded questions wait for retrieval, so under "
                             "overload requests queue before the embedder (default: --retrieve-batch)")
    parser.add_argument("--embed-threads", type=int, default=1, metavar="N",
                        help="parallel query-embedding runs (default 1: embedding keeps to one core, retrieval and "
                             "responses have the others)")
    parser.add_argument("--access-log", action="store_true", help="log every request on stderr")


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def run_serve(args: argparse.Namespace) -> int:
    """Open the index, bind, print the address, serve until interrupted; returns the exit code."""
    try:
        import fastapi  # noqa: F401
        import uvicorn
    except ImportError:
        print("noderag serve: error: the server needs the serve extra: pip install 'noderag[serve]'", file=sys.stderr)
        return 1
    from ..store.tables import IndexStore
    from ..search import SearchConfig
    from .app import ServeSettings, create_app

    if not (0 <= args.port <= 65535):
        print(f"noderag serve: error: --port must be 0..65535, got {args.port}", file=sys.stderr)
        return 1
    for flag, v in (("--max-batch", args.max_batch), ("--retrieve-batch", args.retrieve_batch),
                    ("--max-pending", args.max_pending), ("--embed-threads", args.embed_threads)):
        if v is not None and v < 1:
            print(f"noderag serve: error: {flag} must be >= 1, got {v}", file=sys.stderr)
            return 1
    store = IndexStore.open(args.index)
    config = SearchConfig()
    if args.config:
        from ..config import load_config

        config = load_config(args.config).search
    spec = args.llm or getattr(getattr(store.config, "llm", None), "spec", None)
    llm = None
    if spec:
        from ..llm.options import OptionError
        from ..search.api import index_llm

        try:  # through the index's LLM cache, as the CLI's answers
            llm = index_llm(store, spec, args.llm_option)
        except (OptionError, ValueError, TypeError) as exc:
            print(f"noderag serve: error: {exc}", file=sys.stderr)
            return 1
    api_key = args.api_key or os.environ.get(API_KEY_ENV) or None
    if not _is_loopback(args.host) and api_key is None:
        print(f"noderag serve: warning: listening on {args.host} without --api-key: anyone who can reach it "
              "can query the index", file=sys.stderr)
    settings = ServeSettings(api_key=api_key, max_batch=args.max_batch, retrieve_batch=args.retrieve_batch,
                             max_pending=args.max_pending, embed_threads=args.embed_threads,
                             llm_spec=spec if llm else None)
    app = create_app(store, llm=llm, settings=settings, search_config=config)
    family = socket.AF_INET6 if ":" in args.host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((args.host, args.port))
    except OSError as exc:
        sock.close()
        print(f"noderag serve: error: cannot listen on {args.host}:{args.port}: {exc.strerror}", file=sys.stderr)
        return 1
    sock.listen(2048)
    port = sock.getsockname()[1]
    shown = f"[{args.host}]" if family == socket.AF_INET6 else args.host
    nodes = store.graph.n
    del store  # the app holds the generation now (and lets go of it when a newer one is served)
    try:  # a Ctrl-C as soon as the address is out (before uvicorn has its handlers) is a clean stop too
        print(f"noderag serve: http://{shown}:{port}/ ({nodes:,} nodes; LLM: {spec if llm else 'none'}; "
              f"API key: {'required' if api_key else 'off'})", file=sys.stderr, flush=True)
        cfg = uvicorn.Config(app, log_level="warning", access_log=args.access_log, timeout_keep_alive=30,
                             server_header=False)
        uvicorn.Server(cfg).run(sockets=[sock])
    except KeyboardInterrupt:  # Ctrl-C is how a server is stopped: uvicorn re-raises it after shutting down
        pass
    finally:
        sock.close()
    print("noderag serve: stopped", file=sys.stderr)
    return 0
