"""A throwaway PostgreSQL server for the tests: initdb + pg_ctl on a free loopback port.

The server binaries come from ``pg_config --bindir`` (Debian's postgresql-15 keeps them off
PATH). initdb refuses to run as root, so as root the cluster's directory belongs to the
``postgres`` user and every server command runs through ``runuser``. ``KCP_OPA_TEST_POSTGRES``
(a libpq URI) points the tests at an existing server instead; then stop/start are refused.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

from netkit import free_port


class ClusterUnavailable(RuntimeError):
    """PostgreSQL cannot be started here; the message says why in one line."""


def _bindir() -> Path:
    pg_config = shutil.which("pg_config")
    if pg_config is None:
        raise ClusterUnavailable("pg_config not found: install PostgreSQL 15 (make sysdeps-postgres)")
    out = subprocess.run([pg_config, "--bindir"], capture_output=True, text=True, check=True).stdout.strip()
    if not (Path(out) / "initdb").exists():
        raise ClusterUnavailable(f"no initdb in {out}: install postgresql-15 (make sysdeps-postgres)")
    return Path(out)


def _as_owner(argv: list[str]) -> list[str]:
    return ["runuser", "-u", "postgres", "--", *argv] if os.geteuid() == 0 else argv


class PostgresServer:
    """One server: its superuser DSN, fresh databases on demand, and real stop/start for outage tests."""

    def __init__(self, dsn: str, *, bindir: Path | None = None, root: Path | None = None, port: int = 0) -> None:
        self.dsn = dsn
        self.port = port
        self._bindir = bindir
        self._root = root

    def database(self, name: str) -> str:
        """DSN of database NAME on this server, dropped and created anew (each test starts empty)."""
        import psycopg

        with psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.dsn.rsplit("/", 1)[0] + f"/{name}"

    def _ctl(self, *args: str) -> None:
        if self._bindir is None or self._root is None:
            raise ClusterUnavailable("an external server (KCP_OPA_TEST_POSTGRES) is not stopped or started by tests")
        data = str(self._root / "data")
        subprocess.run(
            _as_owner([str(self._bindir / "pg_ctl"), "-D", data, *args]), check=True, capture_output=True, timeout=120
        )

    def start(self) -> None:
        assert self._root is not None
        opts = f"-p {self.port} -k {self._root} -c listen_addresses=127.0.0.1 -c max_connections=200"
        self._ctl("-o", opts, "-l", str(self._root / "server.log"), "-w", "start")

    def stop(self, mode: str = "fast") -> None:
        self._ctl("-m", mode, "-w", "stop")

    def restart(self) -> None:
        self.stop()
        self.start()


@contextlib.contextmanager
def postgres_server() -> Iterator[PostgresServer]:
    """Yield a running server; stop it and remove its files afterwards."""
    given = os.environ.get("KCP_OPA_TEST_POSTGRES")
    if given:
        yield PostgresServer(given)
        return
    bindir = _bindir()
    root = Path(tempfile.mkdtemp(prefix="kcp-opa-pg-"))
    try:
        if os.geteuid() == 0:
            shutil.chown(root, "postgres")
        init = subprocess.run(
            _as_owner([str(bindir / "initdb"), "-D", str(root / "data"), "-A", "trust", "-U", "postgres", "--no-sync"]),
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        if init.returncode != 0:
            raise ClusterUnavailable("initdb failed: " + (init.stderr.strip().splitlines() or ["no output"])[-1])
        port = free_port()
        server = PostgresServer(f"postgresql://postgres@127.0.0.1:{port}/postgres", bindir=bindir, root=root, port=port)
        try:
            server.start()
        except subprocess.CalledProcessError as exc:
            log = root / "server.log"
            last = (
                (log.read_text(errors="replace").strip().splitlines() or [str(exc)])[-1] if log.exists() else str(exc)
            )
            raise ClusterUnavailable(f"pg_ctl start failed: {last}") from exc
        try:
            yield server
        finally:
            with contextlib.suppress(Exception):
                server.stop("immediate")
    finally:
        shutil.rmtree(root, ignore_errors=True)
