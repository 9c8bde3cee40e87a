"""Attack class: an unbounded part of the action (issue 26, class 2).

An agent that cannot talk its way past the gate tries to stall it: thousands of ``true``
attribute flags (regopy was quadratic in them: 4,000 flags took 4-11 s), an action a few bytes
over the 1 MiB cap handed to the library, the HTTP API, MCP or stdio, and bodies Python's json
reads but the project's strict reader refuses (duplicate keys, a BOM, UTF-16). Each entry point
is a real one: ``Gate.decide``, a ``kcp-opa serve`` process over HTTP and over stdio.
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
from conftest import DEPLOYMENTS, POLICIES, REPO
from servicekit import start_server, stop_server

from kcp_opa.compile.bundle import read_bundle
from kcp_opa.compile.compiler import compile_bundle
from kcp_opa.core.errors import ActionRejectedError
from kcp_opa.decide.action import MAX_ACTION_BYTES
from kcp_opa.decide.engine import DECISION_ENTRYPOINT, RegopyEngine
from kcp_opa.decide.gate import Gate, build_input
from kcp_opa.trail.ledger import read_entries

#: The supplier payment, made by the local agent the tests call as (who acts is the caller).
KYA = json.loads((REPO / "fixtures" / "kya-supplier-payment-action.json").read_text()) | {"agent_id": "local-agent"}
NOW = "2026-07-17T08:00:00Z"
TOKEN = "kcp-opa-unbounded-token-" + "u" * 24


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("unbounded") / "finance.tar.gz"
    base = DEPLOYMENTS / "finance"
    compile_bundle([base / "knowledge.yaml"], base / "matrix.yaml", POLICIES, out)
    return out


def _flags(count: int) -> dict[str, Any]:
    action = copy.deepcopy(KYA)
    action["attributes"] = {f"flag_{i:05d}": True for i in range(count)}
    return action


def _oversized() -> dict[str, Any]:
    """Serialized, 10 bytes over the 1 MiB cap and within every other cap: 1,024 attribute
    values of up to 1,024 characters and 256 evidence references of up to 512."""
    action = copy.deepcopy(KYA)
    action["attributes"] = {f"note_{i:02d}": ["n" * 1024] * 63 for i in range(16)}
    refs = [f"ref:{i:03d}:" + "r" * 500 for i in range(256)]
    action["evidence_references"] = refs

    def size() -> int:
        return len(json.dumps(action, separators=(",", ":"), ensure_ascii=False).encode())

    index = 0
    while size() > MAX_ACTION_BYTES + 10:  # trim references until exactly 10 bytes over
        cut = min(size() - MAX_ACTION_BYTES - 10, len(refs[index]) - 1)
        refs[index] = refs[index][: len(refs[index]) - cut]
        index += 1
    assert size() == MAX_ACTION_BYTES + 10
    return action


def test_thousands_of_true_flags_are_refused_at_the_contract(bundle: Path) -> None:
    gate = Gate.from_bundle(bundle)
    with pytest.raises(ActionRejectedError) as refused:
        gate.decide(_flags(4000), now=NOW)
    assert refused.value.path == "/attributes"
    nested = copy.deepcopy(KYA)
    nested["attributes"] = {f"k{i}": [True] * 64 for i in range(32)}  # 32 keys, 2,080 values
    with pytest.raises(ActionRejectedError, match="1,024 values"):
        gate.decide(nested, now=NOW)


def test_the_policy_reads_flags_in_linear_time_even_past_the_caps(bundle: Path) -> None:
    """The quadratic construct is gone, not just fenced off: 4,000 flags straight to the engine."""
    engine = RegopyEngine(read_bundle(bundle), DECISION_ENTRYPOINT)
    small = build_input(_flags(256), now=NOW).document
    large = dict(small) | {"action": _flags(4000)}  # the contract would refuse it; the policy must not care
    engine.evaluate(small)
    started = time.perf_counter()
    engine.evaluate(small)
    base = time.perf_counter() - started
    started = time.perf_counter()
    answer = engine.evaluate(large)
    spent = time.perf_counter() - started
    assert answer.error is None and answer.value is not None
    # 15.6x the flags: linear is ~15x the flag cost at most; it was 4-11 s (quadratic)
    assert spent < max(2.0, 25 * base), f"4,000 flags: {spent:.2f} s, 256 flags: {base:.3f} s"


def test_the_worst_action_the_caps_admit_decides_fast_and_alike(bundle: Path) -> None:
    from opa_bindings import OpaEngine

    worst = copy.deepcopy(KYA)
    triggers = ["new_beneficiary", "screening_uncertain", "geo_anomaly", "irreversible"]
    worst["attributes"] = {name: True for name in triggers} | {
        f"flag_{i:03d}".ljust(128, "f"): [True] * (4 if i < 12 else 3) for i in range(256 - len(triggers))
    }  # 256 keys (the cap), 1,024 values (the cap), keys of 128 characters (the cap)
    gate = Gate.from_bundle(bundle)
    gate.decide(worst, now=NOW)  # within the caps: decided, not refused
    document = build_input(worst, now=NOW).document
    loaded = read_bundle(bundle)
    engine = RegopyEngine(loaded, DECISION_ENTRYPOINT)
    opa = OpaEngine()
    for name, source in sorted(loaded.modules.items()):
        opa.add_policy(name, source)
    opa.add_data(loaded.data)
    try:
        assert engine.evaluate(document).value == opa.eval_document("kcp.gate.decision", dict(document))
        started = time.perf_counter()
        engine.evaluate(document)
        assert time.perf_counter() - started < 0.25
    finally:
        opa.close()
    values = sum(len(v) + 1 if isinstance(v, list) else 1 for v in worst["attributes"].values())
    assert values == 1024  # at the cap (docs/input-contract.md "Sizes"), not under it


def test_a_dict_over_1_mib_is_refused_by_the_library(bundle: Path) -> None:
    gate = Gate.from_bundle(bundle)
    with pytest.raises(ActionRejectedError, match="over the 1024 KiB limit"):
        gate.decide(_oversized(), now=NOW)


# --- the service: a real `kcp-opa serve` process --------------------------------------------------


@pytest.fixture(scope="module")
def server(bundle: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    work = tmp_path_factory.mktemp("unbounded-serve")
    ledger = work / "ledger.jsonl"
    process, url = start_server(
        ["--bundle", str(bundle), "--store", str(work / "s.db"), "--ledger", str(ledger)],
        env={"KCP_OPA_SERVE_TOKEN": TOKEN},
    )
    try:
        yield url, ledger
    finally:
        stop_server(process)


def _post(url: str, path: str, body: bytes, **headers: str) -> httpx2.Response:
    heads = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json", **headers}
    return httpx2.post(f"{url}{path}", content=body, headers=heads, timeout=120)


def _action_text(action: dict[str, Any]) -> str:
    return json.dumps(action, separators=(",", ":"), ensure_ascii=False)


def test_http_refuses_what_the_strict_reader_refuses(server: tuple[str, Path]) -> None:
    url, ledger = server
    text = _action_text(KYA)
    duplicate = ('{"action":' + text[:-1] + ',"tenant_id":"tenant_other"}}').encode()
    bodies = {
        "duplicate key": duplicate,
        "BOM": b"\xef\xbb\xbf" + ('{"action":' + text + "}").encode(),
        "UTF-16": ('{"action":' + text + "}").encode("utf-16"),
        "NaN": ('{"action":' + text[:-1] + ',"attributes":{"x":NaN}}}').encode(),
    }
    for what, body in bodies.items():
        for path in ("/v1/decisions", "/v1/data/kcp/gate/decision"):
            answer = _post(url, path, body if path == "/v1/decisions" else body.replace(b'"action"', b'"input"'))
            assert answer.status_code == 400, (what, path, answer.text[:300])
            assert answer.json()["code"] == "bad_request"
    refused = [e for _, e in read_entries(ledger) if e["type"] == "failure" and e.get("code") == "bad_request"]
    assert len(refused) >= 8
    assert not [e for _, e in read_entries(ledger) if e["type"] == "decision"]  # none of them was decided


def test_http_and_mcp_refuse_an_action_over_1_mib(server: tuple[str, Path]) -> None:
    url, _ = server
    big = _action_text(_oversized())
    answer = _post(url, "/v1/decisions", ('{"action":' + big + "}").encode())
    assert answer.status_code == 400 and answer.json()["code"] == "action_rejected", answer.text[:300]
    assert "over the 1024 KiB limit" in answer.json()["error"]
    call = '{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"evaluate_action","arguments":'
    session = _mcp_session(url)
    answered = _post(url, "/mcp", (call + '{"action":' + big + "}}}").encode(), **session)
    assert answered.status_code == 200, answered.text[:300]
    result = answered.json()["result"]
    assert result["isError"] and result["structuredContent"]["code"] == "action_rejected"
    flags = {"jsonrpc": "2.0", "id": 8, "method": "tools/call"}
    flags["params"] = {"name": "evaluate_action", "arguments": {"action": _flags(4000)}}
    answered = _post(url, "/mcp", json.dumps(flags).encode(), **session)
    assert answered.json()["result"]["structuredContent"]["code"] == "action_rejected"


def test_mcp_over_http_refuses_a_duplicate_key(server: tuple[str, Path]) -> None:
    url, ledger = server
    session = _mcp_session(url)
    args = '{"action":' + _action_text(KYA) + "}"
    body = '{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"evaluate_action","name":"hash_action",'
    answered = _post(url, "/mcp", (body + '"arguments":' + args + "}}").encode(), **session)
    assert answered.status_code == 400 and answered.json()["code"] == "bad_request", answered.text[:300]
    assert any(e.get("tool") == "/mcp" and e.get("code") == "bad_request" for _, e in read_entries(ledger))


def _mcp_session(url: str) -> dict[str, str]:
    accept = {"Accept": "application/json, text/event-stream"}
    init = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
    }
    opened = _post(url, "/mcp", json.dumps(init).encode(), **accept)
    assert opened.status_code == 200, opened.text
    session = {**accept, "mcp-session-id": opened.headers["mcp-session-id"], "mcp-protocol-version": "2025-11-25"}
    _post(url, "/mcp", json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}).encode(), **session)
    return session


def test_stdio_refuses_a_duplicate_key_and_a_line_over_the_cap(bundle: Path, tmp_path: Path) -> None:
    ledger = tmp_path / "ledger.jsonl"
    command = [sys.executable, "-m", "kcp_opa", "serve", "--bundle", str(bundle), "--store", str(tmp_path / "s.db")]
    process = subprocess.Popen(
        [*command, "--ledger", str(ledger)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert process.stdin is not None and process.stdout is not None

    def send(line: bytes) -> dict[str, Any]:
        assert process.stdin is not None and process.stdout is not None
        process.stdin.write(line + b"\n")
        process.stdin.flush()
        answer: dict[str, Any] = json.loads(process.stdout.readline())
        return answer

    try:
        client = {"name": "t", "version": "1"}
        params = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": client}
        init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": params}
        assert "result" in send(json.dumps(init).encode())
        process.stdin.write(b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n')
        text = _action_text(KYA)
        call = '{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"evaluate_action","arguments":'
        duplicated = call + '{"action":' + text[:-1] + ',"tenant_id":"tenant_other"}}}}'
        refused = send(duplicated.encode())
        assert refused["error"]["code"] == -32700 and "duplicate key" in refused["error"]["message"], refused
        huge = call + '{"action":' + _action_text(_oversized()) + '},"pad":"' + "p" * (2 << 20) + '"}}'
        assert send(huge.encode())["error"]["code"] == -32700
        good = send((call + '{"action":' + text + "}}}").encode())
        decided = good["result"]["structuredContent"]  # decided (this serve has no context sources: held)
        assert decided["decision"] == "ESCALATE" and "context_missing" in decided["reason_codes"], decided
    finally:
        process.stdin.close()
        process.wait(timeout=60)
    refusals = [e for _, e in read_entries(ledger) if e["type"] == "failure" and e.get("tool") == "mcp-stdio"]
    assert len(refusals) == 2
    decisions = [e for _, e in read_entries(ledger) if e["type"] == "decision"]
    assert len(decisions) == 1  # only the good line was decided
