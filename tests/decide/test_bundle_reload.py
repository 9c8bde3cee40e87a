"""Hot reload: a new bundle swapped in under concurrent deciders, a broken one refused while the
old one serves, and a real HTTP bundle server on loopback (ETags, 304s) followed by a gate and by
``kcp-opa serve``."""

from __future__ import annotations

import hashlib
import http.server
import json
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx2
import pytest
from conftest import DEPLOYMENTS, POLICIES, REPO, vouched_gate
from servicekit import start_server, stop_server

from kcp_opa.compile.compiler import CompileOptions, compile_bundle
from kcp_opa.core.errors import BundleError
from kcp_opa.decide.follow import BundleFollower, DirectorySource, HttpSource
from kcp_opa.trail.ledger import AuditLedger, read_entries

FINANCE = DEPLOYMENTS / "finance"
ACTION = json.loads((REPO / "fixtures" / "kya-supplier-payment-action.json").read_text(encoding="utf-8"))
NOW = "2026-11-29T10:00:00Z"


def _release(out: Path, version: str) -> Path:
    compile_bundle(
        [FINANCE / "knowledge.yaml"],
        FINANCE / "matrix.yaml",
        POLICIES,
        out,
        options=CompileOptions(revision=f"finance-{version}", policy_version_override=version),
    )
    return out


@pytest.fixture(scope="module")
def releases(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    work = tmp_path_factory.mktemp("releases")
    return {v: _release(work / f"finance-{v}.tar.gz", v) for v in ("1.0.0", "2.0.0")}


def test_reload_under_eight_deciders_loses_nothing_and_never_mixes(tmp_path: Path, releases: dict[str, Path]) -> None:
    ledger = tmp_path / "audit.jsonl"
    gate = vouched_gate(releases["1.0.0"], ledger=AuditLedger(ledger))
    sha = {v: hashlib.sha256(p.read_bytes()).hexdigest() for v, p in releases.items()}
    stop = threading.Event()
    decided: list[dict[str, object]] = []

    def decider() -> int:
        count = 0
        while not stop.is_set():
            decided.append(gate.decide(ACTION, now=NOW).to_dict())
            count += 1
        return count

    with ThreadPoolExecutor(max_workers=8) as pool:
        futures = [pool.submit(decider) for _ in range(8)]
        for version in ("2.0.0", "1.0.0", "2.0.0", "1.0.0", "2.0.0"):
            time.sleep(0.3)
            assert gate.activate(releases[version]).bundle.sha256 == sha[version]
        time.sleep(0.3)
        stop.set()
        counts = [f.result() for f in futures]
    assert sum(counts) == len(decided) > 50
    entries = [e for _, e in read_entries(ledger) if e.get("type") == "decision"]
    assert len(entries) == len(decided)  # no decision lost, none unrecorded
    seen = set()
    for decision in decided:
        version = str(decision["policy_version"])
        assert decision["bundle_revision"] == f"finance-{version}" and decision["bundle_sha256"] == sha[version]
        assert decision["decision"] == "HUMAN_APPROVAL"
        seen.add(version)
    assert seen == {"1.0.0", "2.0.0"}
    for entry in entries:  # the input, the bundle and the labels of every entry name one release
        version = entry["labels"]["policy_version"]
        assert entry["input"]["context"]["bundle_revision"] == entry["bundles"]["kcp-opa"]["revision"]
        assert entry["bundles"]["kcp-opa"] == {"revision": f"finance-{version}", "sha256": sha[version]}
    assert gate.status()["bundle"]["sha256"] == sha["2.0.0"]


def test_a_broken_bundle_keeps_the_old_one_serving(tmp_path: Path, releases: dict[str, Path]) -> None:
    gate = vouched_gate(releases["1.0.0"])
    prepared = gate.prepare(ACTION, now=NOW)
    broken = tmp_path / "broken.tar.gz"
    broken.write_bytes(releases["2.0.0"].read_bytes()[:-200])
    with pytest.raises(BundleError):
        gate.activate(broken)
    status = gate.status()["bundle"]
    assert status["revision"] == "finance-1.0.0" and status["last_error"] and "broken.tar.gz" in status["last_error"]
    assert gate.decide_prepared(prepared).bundle_revision == "finance-1.0.0"
    gate.activate(releases["2.0.0"])
    assert gate.status()["bundle"]["last_error"] is None
    # An input prepared on the old bundle is still decided on the old bundle, whole.
    old = gate.decide_prepared(prepared)
    assert (old.bundle_revision, old.policy_version) == ("finance-1.0.0", "1.0.0")


class _BundleServer(http.server.ThreadingHTTPServer):
    """A bundle service on loopback: GET /bundles/finance.tar.gz with an ETag; If-None-Match -> 304."""

    content = b""
    requests = 0
    not_modified = 0


class _Handler(http.server.BaseHTTPRequestHandler):
    server: _BundleServer

    def do_GET(self) -> None:
        self.server.requests += 1
        etag = '"' + hashlib.sha256(self.server.content).hexdigest()[:32] + '"'
        if self.headers.get("If-None-Match") == etag:
            self.server.not_modified += 1
            self.send_response(304)
            self.send_header("ETag", etag)
            self.end_headers()
            return
        self.send_response(200)
        self.send_header("Content-Type", "application/gzip")
        self.send_header("ETag", etag)
        self.send_header("Content-Length", str(len(self.server.content)))
        self.end_headers()
        self.wfile.write(self.server.content)

    def log_message(self, *_: object) -> None:
        pass


@pytest.fixture
def bundle_server() -> Iterator[_BundleServer]:
    server = _BundleServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def test_a_gate_follows_an_http_bundle_server_with_etags(
    tmp_path: Path, releases: dict[str, Path], bundle_server: _BundleServer
) -> None:
    url = f"http://127.0.0.1:{bundle_server.server_address[1]}/bundles/finance.tar.gz"
    gate = vouched_gate(releases["1.0.0"])
    local = tmp_path / "active.tar.gz"
    follower = BundleFollower(HttpSource(url), gate.activate, local)
    bundle_server.content = releases["1.0.0"].read_bytes()
    assert follower.poll_once() is True and gate.bundle_revision == "finance-1.0.0"  # same bytes: no swap
    assert follower.poll_once() is False and bundle_server.not_modified == 1
    bundle_server.content = releases["2.0.0"].read_bytes()
    assert follower.poll_once() is True and gate.bundle_revision == "finance-2.0.0"
    assert local.read_bytes() == bundle_server.content and follower.status()["etag"].startswith('"')
    bundle_server.content = b"not a bundle"
    assert follower.poll_once() is False and gate.bundle_revision == "finance-2.0.0"
    assert "not a gzipped tar bundle" in str(follower.status()["last_error"])
    assert follower.poll_once() is False  # the refused version is not retried until the source changes
    assert local.read_bytes() == releases["2.0.0"].read_bytes()


def test_a_gate_follows_an_unpacked_directory(tmp_path: Path, releases: dict[str, Path]) -> None:
    import tarfile

    directory = tmp_path / "unpacked"
    with tarfile.open(releases["2.0.0"], "r:gz") as tar:
        tar.extractall(directory, filter="data")
    gate = vouched_gate(releases["1.0.0"])
    follower = BundleFollower(DirectorySource(directory), gate.activate, tmp_path / "active.tar.gz")
    assert follower.poll_once() is True and gate.bundle_revision == "finance-2.0.0"
    assert follower.poll_once() is False


def test_the_service_follows_the_bundle_server(
    tmp_path: Path, releases: dict[str, Path], bundle_server: _BundleServer
) -> None:
    url = f"http://127.0.0.1:{bundle_server.server_address[1]}/bundles/finance.tar.gz"
    bundle_server.content = releases["1.0.0"].read_bytes()
    local = tmp_path / "finance.tar.gz"
    local.write_bytes(bundle_server.content)
    token = "t-agent-" + "a" * 32
    args = ["--bundle", str(local), "--store", str(tmp_path / "s.db"), "--ledger", str(tmp_path / "l.jsonl")]
    args += ["--bundle-source", url, "--poll-seconds", "0.2"]
    process, base = start_server(args, env={"KCP_OPA_SERVE_TOKEN": token})
    headers = {"Authorization": f"Bearer {token}"}

    def status() -> dict[str, object]:
        document: dict[str, object] = httpx2.get(f"{base}/v1/status", headers=headers, timeout=30).json()
        return document

    def wait_for(check: object) -> dict[str, object]:
        deadline = time.monotonic() + 120
        while True:
            current = status()
            if callable(check) and check(current):
                return current
            assert time.monotonic() < deadline, current
            time.sleep(0.2)

    try:
        first = wait_for(lambda s: s["bundle_source"]["last_poll"] is not None)
        assert first["bundle"]["revision"] == "finance-1.0.0"
        bundle_server.content = releases["2.0.0"].read_bytes()
        wanted = hashlib.sha256(bundle_server.content).hexdigest()
        followed = wait_for(lambda s: s["bundle"]["sha256"] == wanted)
        assert followed["bundle_revision"] == "finance-2.0.0" and followed["policy_version"] == "2.0.0"
        mine = {**ACTION, "agent_id": "local-agent"}  # who acts is the caller
        decided = httpx2.post(f"{base}/v1/decisions", json={"action": mine}, headers=headers, timeout=60).json()
        assert decided["bundle_sha256"] == wanted and decided["bundle_revision"] == "finance-2.0.0"
        flip = httpx2.post(f"{base}/v1/admin/mode", json={"mode": "log_only"}, headers=headers, timeout=30)
        assert flip.status_code == 403 and flip.json()["code"] == "not_authorized"  # an agent may not
        assert status()["bundle"]["sha256"] == wanted and status()["mode"]["mode"] == "enforce"
        bundle_server.content = b"broken"
        refused = wait_for(lambda s: s["bundle_source"]["last_error"] is not None)
        assert refused["bundle"]["sha256"] == wanted  # still serving 2.0.0
        assert bundle_server.not_modified > 0  # it polled with If-None-Match and got 304s
    finally:
        stop_server(process)
    assert local.read_bytes() == releases["2.0.0"].read_bytes()
