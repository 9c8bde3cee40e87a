"""Attacks on the gate through a stalled identity provider (`kcp-opa serve` as a real process): a
provider that accepts connections and never answers, or drips its answer, plus a flood of
unauthenticated ``GET /ui/sso/start``, never stalls the gate's decisions.

Guards (kcp_opa/service/uisso.py, oidc.py): single sign-on talks to the provider on its own few
threads, never the pool decisions share; a discovery fetch already under way is not queued behind
(503 at once); a failed discovery is remembered (503 at once); every provider call ends within a
deadline overall, not per socket read.
"""

from __future__ import annotations

import socket
import sqlite3
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx2
import pytest
from oidckit import Provider, oidc_args
from uikit import ui_servers

from kcp_opa.service.oidc import FETCH_DEADLINE_S, fetch_json
from kcp_opa.service.oidctoken import OidcUnavailable
from kcp_opa.service.uisso import MAX_SIGN_ONS_UNDER_WAY

FLOOD = 60


@pytest.fixture
def silent_provider() -> Iterator[Provider]:
    """A provider address whose socket accepts (the kernel's backlog) and never answers."""
    hole = socket.socket()
    hole.bind(("127.0.0.1", 0))
    hole.listen(1024)
    try:
        yield Provider(port=hole.getsockname()[1])
    finally:
        hole.close()


def test_a_silent_provider_and_a_sign_on_flood_do_not_stall_decisions(
    silent_provider: Provider, tmp_path: Path
) -> None:
    """Guard: SSO's own thread limiter, no queueing behind a fetch under way, a remembered failure."""
    with ui_servers(tmp_path, extra=oidc_args(tmp_path, silent_provider)) as (server,):
        url, token = server["url"], server["tokens"]["auditor"]
        starts: list[tuple[Any, float]] = []

        def start() -> None:
            began = time.monotonic()
            try:
                answer: Any = httpx2.get(f"{url}/ui/sso/start", timeout=60).status_code
            except httpx2.HTTPError as exc:
                answer = repr(exc)
            starts.append((answer, time.monotonic() - began))

        flood = [threading.Thread(target=start, daemon=True) for _ in range(FLOOD)]
        for thread in flood:
            thread.start()
        time.sleep(1.0)  # the flood is in: one discovery fetch hangs on the silent provider
        began = time.monotonic()
        status = httpx2.get(f"{url}/v1/status", headers={"Authorization": f"Bearer {token}"}, timeout=30)
        took = time.monotonic() - began
        assert status.status_code == 200 and took < 3.0, f"/v1/status took {took:.1f} s during the flood"
        for thread in flood:
            thread.join(60)
        assert [answer for answer, _ in starts] == [503] * FLOOD  # fail closed: no redirect, no 500
        assert max(seconds for _, seconds in starts) < FETCH_DEADLINE_S + 5
        began = time.monotonic()
        again = httpx2.get(f"{url}/ui/sso/start", timeout=60)
        assert again.status_code == 503 and time.monotonic() - began < 2.0  # the failure is remembered


def test_a_provider_dripping_its_answer_is_cut_at_the_deadline() -> None:
    """Guard: one deadline for the whole call (a byte every second would pass any per-read timeout)."""

    class Drip(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            return

        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", "64")
            self.end_headers()
            try:
                for _ in range(64):
                    self.wfile.write(b" ")
                    self.wfile.flush()
                    time.sleep(1.0)
            except OSError:
                return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Drip)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        began = time.monotonic()
        with pytest.raises(OidcUnavailable, match="did not answer within"):
            fetch_json(f"http://127.0.0.1:{server.server_port}/.well-known/openid-configuration")
        assert time.monotonic() - began < FETCH_DEADLINE_S + 1.5
    finally:
        server.shutdown()
        server.server_close()


def test_a_sign_on_flood_is_capped_before_it_fills_the_store(tmp_path: Path) -> None:
    """Guard: /ui/sso/start needs no sign-in and each start keeps a store row ten minutes, so a replica
    begins at most MAX_SIGN_ONS_UNDER_WAY in that time (uisso.SingleSignOn._room_for_one_more); beyond
    it the start is a 503 page that writes nothing."""
    provider = Provider().start()
    try:
        with ui_servers(tmp_path, extra=oidc_args(tmp_path, provider)) as (server,):
            url = server["url"]
            answers: list[int] = []

            def flood(count: int) -> None:
                with httpx2.Client(timeout=60) as client:
                    answers.extend(client.get(f"{url}/ui/sso/start").status_code for _ in range(count))

            # One start first: it fetches the provider's metadata. During that fetch a concurrent
            # start is a 503 "try again" by design (none queues behind it), which is not the cap.
            flood(1)
            assert answers == [303], answers
            share = (MAX_SIGN_ONS_UNDER_WAY - 1) // 8
            workers = [threading.Thread(target=flood, args=(share,)) for _ in range(8)]
            for worker in workers:
                worker.start()
            for worker in workers:
                worker.join(300)
            flood(MAX_SIGN_ONS_UNDER_WAY - 1 - 8 * share + 50)
            assert answers.count(303) == MAX_SIGN_ONS_UNDER_WAY and answers.count(503) == 50
            refused = httpx2.get(f"{url}/ui/sso/start", timeout=60)
            assert refused.status_code == 503 and "Too many sign-ons" in refused.text
            with sqlite3.connect(tmp_path / "service.db") as db:
                assert db.execute("SELECT count(*) FROM ui_sign_ins").fetchone()[0] == MAX_SIGN_ONS_UNDER_WAY
    finally:
        provider.stop()
