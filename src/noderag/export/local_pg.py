"""A throwaway PostgreSQL server for trying the postgres export, its tests and its benchmark.

:func:`temporary_cluster` runs ``initdb`` and ``pg_ctl`` of a local PostgreSQL installation (Debian's
``postgresql`` package puts them in ``/usr/lib/postgresql/<version>/bin``) on a fresh data folder
in a temporary directory, listening on 127.0.0.1 on a free port with trust authentication, and
removes everything on exit. PostgreSQL refuses to run as root; under root the server runs as the
unprivileged user ``nobody``, which then owns the temporary folder::

    from .local_pg import temporary_cluster

    with temporary_cluster() as dsn:      # postgresql://noderag@127.0.0.1:PORT/postgres
        export_index("my-index", "postgres", dsn=dsn)
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path
from typing import Iterator

from ..errors import NodeRAGError

__all__ = ["temporary_cluster", "find_pg_bin", "PostgresNotFound"]

_USER = "noderag"


class PostgresNotFound(NodeRAGError, FileNotFoundError):
    """No ``initdb``/``pg_ctl`` on this machine (install Debian's ``postgresql`` package)."""


def find_pg_bin() -> Path:
    """The folder of ``initdb`` and ``pg_ctl``: on PATH, else the newest ``/usr/lib/postgresql/*/bin``."""
    found = shutil.which("initdb")
    if found and shutil.which("pg_ctl"):
        return Path(os.path.realpath(found)).parent
    versions = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"),
                      key=lambda p: int(Path(p).parts[-3]) if Path(p).parts[-3].isdigit() else 0)
    if versions:
        return Path(versions[-1]).parent
    raise PostgresNotFound("initdb/pg_ctl not found: install PostgreSQL (Debian: apt-get install postgresql)")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def temporary_cluster(*, timeout_s: float = 60.0) -> Iterator[str]:
    """Start a PostgreSQL cluster in a temporary folder; yield its DSN; stop it and remove the folder."""
    bin_dir = find_pg_bin()
    root = Path(tempfile.mkdtemp(prefix="noderag-pg-"))
    run_as: dict = {}
    if os.geteuid() == 0:  # postgres will not run as root
        nobody = pwd.getpwnam("nobody")
        os.chown(root, nobody.pw_uid, nobody.pw_gid)
        os.chmod(root, 0o700)
        run_as = {"user": nobody.pw_uid, "group": nobody.pw_gid, "extra_groups": []}
    data = root / "data"
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
    env.update(LC_ALL="C", LANG="C")

    def run(*cmd: str) -> None:
        proc = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True, timeout=timeout_s, **run_as)
        if proc.returncode != 0:
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
            raise RuntimeError(f"{Path(cmd[0]).name} failed (exit {proc.returncode}): {' | '.join(tail)}")

    started = False
    try:
        run(str(bin_dir / "initdb"), "-D", str(data), "-U", _USER, "-A", "trust", "-E", "UTF8", "--no-sync")
        opts = (f"-c listen_addresses=127.0.0.1 -c port={port} -c unix_socket_directories='{root}' "
                "-c fsync=off -c full_page_writes=off -c synchronous_commit=off")
        run(str(bin_dir / "pg_ctl"), "-D", str(data), "-o", opts, "-l", str(root / "server.log"), "-w",
            "-t", str(int(timeout_s)), "start")
        started = True
        yield f"postgresql://{_USER}@127.0.0.1:{port}/postgres"
    finally:
        if started:
            with contextlib.suppress(Exception):
                run(str(bin_dir / "pg_ctl"), "-D", str(data), "-m", "fast", "-w", "stop")
        shutil.rmtree(root, ignore_errors=True)
