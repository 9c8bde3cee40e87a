"""Shared test helpers: paths, the CLI as a real process, and both Rego engines."""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parent.parent
DEPLOYMENTS = REPO / "fixtures" / "deployments"
POLICIES = REPO / "policies"
CONFORMANCE = Path(__file__).resolve().parent / "conformance"
SHARED = REPO.parent / "shared"


def run_cli(
    *args: str, cwd: Path | None = None, input_bytes: bytes | None = None, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    """Run ``kcp-opa`` as a real process (what a user or CI runs), never in-process."""
    env = {**os.environ, "COLUMNS": "200"}
    env.pop("KCP_OPA_DEBUG", None)
    return subprocess.run(
        [sys.executable, "-m", "kcp_opa", *args],
        cwd=cwd or REPO,
        capture_output=True,
        text=True,
        env=env,
        input=input_bytes.decode("utf-8") if input_bytes is not None else None,
        timeout=timeout,
        check=False,
    )


def cli_json(*args: str, **kwargs: Any) -> Any:
    proc = run_cli(*args, "--format", "json", **kwargs)
    return proc.returncode, json.loads(proc.stdout) if proc.stdout.strip() else None, proc.stderr


@pytest.fixture
def deployment() -> Iterator[tuple[Path, Path]]:
    base = DEPLOYMENTS / "customer-onboarding"
    yield base / "knowledge.yaml", base / "matrix.yaml"


def regopy_query(bundle: Any, query: str, input_doc: Any = None) -> Any:
    """Evaluate ``x := <query>`` on regopy over a loaded bundle; returns x (or raises)."""
    from regopy import Interpreter

    interp = Interpreter()
    interp.add_data_json(json.dumps(bundle.data, ensure_ascii=False))
    for name, source in sorted(bundle.modules.items()):
        interp.add_module(name, source)
    if input_doc is not None:
        interp.set_input_term(json.dumps(input_doc, ensure_ascii=False))
    output = interp.query(f"x := {query}")
    assert output.ok(), str(output)
    results = output.results  # never .expressions() on a temporary (engine-notes hazard 1)
    if not results or not results[0].bindings:
        return UNDEFINED
    return results[0].bindings["x"]


def opa_query(bundle: Any, query: str, input_doc: Any = None) -> Any:
    """The same on the OPA reference engine (Go), mounting the bundle as ``opa eval -b`` does."""
    from opa_bindings import OpaEngine

    engine = OpaEngine()
    for name, source in sorted(bundle.modules.items()):
        engine.add_policy(name, source)
    engine.add_data(bundle.data)
    result = engine.eval_query(f"x := {query}", input_doc if input_doc is not None else {})
    engine.close()
    if not result:
        return UNDEFINED
    return result[0]["x"]


class _Undefined:
    def __repr__(self) -> str:
        return "UNDEFINED"


UNDEFINED = _Undefined()


def vouched_gate(path: Any, **options: Any) -> Any:
    """``Gate.from_bundle`` (``options``: GateConfig's fields) for tests that write their own actions:
    the host vouches for the facts each action states (kcp_opa.authoring.casecontext.VouchingGate),
    through the real context sources. The trusted context itself is attacked in
    tests/adversarial/test_trusted_context.py."""
    from kcp_opa.authoring.casecontext import vouching
    from kcp_opa.decide.gate import Gate
    from kcp_opa.decide.gateconfig import GateConfig

    return vouching(Gate.from_bundle(path, config=GateConfig(**options)))


def vouched_context(action: Any, now: str) -> dict[str, Any]:
    """The context-stage part of ``input.context`` for a hand-built input: the host vouches for
    the facts ACTION states, established through the real sources (as ``vouched_gate`` does)."""
    from kcp_opa.authoring.casecontext import case_sources
    from kcp_opa.context.builder import build_context
    from kcp_opa.decide.action import action_hash

    sources, principal = case_sources(action, {"from_action": True}, now)
    when = dt.datetime.fromisoformat(now.replace("Z", "+00:00")) if isinstance(now, str) else now
    return build_context(sources, action, principal=principal, action_hash=action_hash(action), now=when)


def receipt_for(decision: Any, action: Any, key: Any, **options: Any) -> dict[str, Any]:
    """A signed receipt (its JSON) for a decision document the test vouches for: what the desk
    signs once its seal held (``kcp_opa.issue_receipt`` itself takes only a sealed record; that
    is attacked in tests/adversarial/test_unauthenticated_decisions.py)."""
    from kcp_opa.authorize.receipts import issue_for_checked_decision

    receipt: dict[str, Any] = issue_for_checked_decision(decision, action, key, **options).to_dict()
    return receipt


#: ``kcp-opa decide --context``: the host vouches for the facts the test's action states.
VOUCHED = REPO / "fixtures" / "context" / "host-vouched.yaml"
VOUCH = ("--context", str(VOUCHED))


@pytest.fixture(scope="session")
def postgres() -> Iterator[Any]:
    """A real PostgreSQL server for `-m postgres` tests.

    Skips with a one-line reason on a machine without PostgreSQL; on CI (CI=true) a server that
    cannot start fails the run instead, so these tests never silently skip there.
    """
    from pgcluster import ClusterUnavailable, postgres_server

    try:
        psycopg = __import__("psycopg")
        del psycopg
    except ImportError as exc:
        if os.environ.get("CI"):
            pytest.fail(f"psycopg is not installed: {exc}")
        pytest.skip(f"psycopg is not installed: {exc}")
    try:
        with postgres_server() as server:
            yield server
    except ClusterUnavailable as exc:
        if os.environ.get("CI"):
            pytest.fail(f"PostgreSQL is required on CI: {exc}")
        pytest.skip(f"PostgreSQL unavailable: {exc}")


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    """The stores on SQLite, then on PostgreSQL (marked ``postgres``): one contract, both backends."""
    import storekit

    if request.param == "sqlite":
        chosen = storekit.Backend("sqlite", str(tmp_path / "stores.db"))
    else:
        server = request.getfixturevalue("postgres")
        chosen = storekit.Backend("postgres", server.database(f"kcp_contract_{next(storekit.NAMES)}"), server)
    try:
        yield chosen
    finally:
        chosen.close()


@pytest.fixture(scope="session")
def softhsm_token(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A throwaway SoftHSM2 token (tests/softhsm.py); its config and PIN in this process's environment."""
    import softhsm

    reason = softhsm.available()
    if reason is not None:
        pytest.fail(reason)  # the Makefile's sysdeps-softhsm installs it: a missing HSM is a failure, not a skip
    token = softhsm.make_token(tmp_path_factory.mktemp("softhsm"))
    with pytest.MonkeyPatch.context() as patch:
        for name, value in token.env().items():
            patch.setenv(name, value)
        yield token


@pytest.fixture(scope="module")
def finance_bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The finance deployment compiled without an engine check (the CLI tests decide and inspect with it)."""
    from kcp_opa.compile.compiler import CompileOptions, compile_bundle

    out = tmp_path_factory.mktemp("bundles") / "finance.tar.gz"
    base = DEPLOYMENTS / "finance"
    compile_bundle(
        [base / "knowledge.yaml"], base / "matrix.yaml", POLICIES, out, options=CompileOptions(engine_check=False)
    )
    return out


@pytest.fixture(scope="module")
def trust_bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The finance deployment compiled with the reference trust registry (cached by content)."""
    from trustkit import compile_with_trust

    return compile_with_trust(tmp_path_factory.mktemp("controls") / "finance.tar.gz")


@pytest.fixture(scope="module")
def desk(trust_bundle: Path) -> Any:
    """A control desk over a vouched gate on ``trust_bundle``, as every control test uses it."""
    from trustkit import make_desk

    return make_desk(vouched_gate(trust_bundle))


@pytest.fixture(scope="module")
def approved(desk: Any) -> Any:
    """The KYA supplier payment opened at ``desk`` with its six controls answered: APPROVED."""
    from trustkit import approve_all

    return approve_all(desk)


@pytest.fixture(params=["Ed25519", "HMAC-SHA256"])
def receipt_key(request: pytest.FixtureRequest) -> Any:
    """A receipt signing key of each algorithm the executor accepts (trustkit.RECEIPT_SIGNERS)."""
    from trustkit import RECEIPT_SIGNERS

    return RECEIPT_SIGNERS[request.param]()
