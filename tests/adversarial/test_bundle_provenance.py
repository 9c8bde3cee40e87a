"""The auditor's attack from the issue: after the fact, an operator edits
kcp/controls/evidence.rego inside the bundle that decided (here: an ai_agent may now give the
independent human approval), updates every hash in .manifest to match and keeps the revision
string. Before decisions were bound to the bundle's bytes, `inspect`, `eval` and `audit replay`
accepted the edited bundle and replay said "reproduced": the audit proved nothing.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import shutil
import tarfile
from pathlib import Path

import pytest
from conftest import DEPLOYMENTS, POLICIES, REPO, run_cli

from kcp_opa.compile.compiler import CompileOptions, compile_bundle
from kcp_opa.decide.gate import Gate
from kcp_opa.decide.gateconfig import GateConfig
from kcp_opa.trail.ledger import AuditLedger

FINANCE = DEPLOYMENTS / "finance"
MODULE = "kcp/controls/evidence.rego"
ACTION = json.loads((REPO / "fixtures" / "kya-supplier-payment-action.json").read_text(encoding="utf-8"))
WEAKER = (b'"independent_human_approval": {"human"}', b'"independent_human_approval": {"human", "ai_agent"}')


def _edit_keeping_the_revision(bundle: Path) -> None:
    """Rewrite ``bundle`` in place: the module weakened, .manifest hashes updated, revision kept."""
    with tarfile.open(bundle, "r:gz") as tar:
        members = {i.name: tar.extractfile(i).read() for i in tar if i.isfile()}  # type: ignore[union-attr]
    assert WEAKER[0] in members[MODULE], "the attack needs the rule it weakens"
    members[MODULE] = members[MODULE].replace(*WEAKER)
    manifest = json.loads(members[".manifest"])
    digest = hashlib.sha256(members[MODULE]).hexdigest()
    manifest["metadata"]["kcp_opa"]["files"][MODULE] = digest
    manifest["metadata"]["kcp_opa"]["sources"][f"policies/{MODULE}"] = digest
    members[".manifest"] = json.dumps(manifest, sort_keys=True, separators=(",", ":")).encode()
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        for name, content in sorted(members.items()):
            info = tarfile.TarInfo(name)
            info.size = len(content)
            tar.addfile(info, io.BytesIO(content))
    bundle.write_bytes(gzip.compress(raw.getvalue(), mtime=0))


@pytest.fixture
def decided(tmp_path: Path) -> tuple[Path, Path]:
    """A release bundle (named revision, as CI would tag it) and a ledger of its decisions."""
    bundles = tmp_path / "bundles"
    bundles.mkdir()
    bundle = bundles / "finance.tar.gz"
    compile_bundle(
        [FINANCE / "knowledge.yaml"],
        FINANCE / "matrix.yaml",
        POLICIES,
        bundle,
        options=CompileOptions(revision="finance-2026.11"),
    )
    ledger = tmp_path / "audit.jsonl"
    gate = Gate.from_bundle(bundle, config=GateConfig(ledger=AuditLedger(ledger)))
    for minute in range(3):
        gate.decide(ACTION, now=f"2026-11-29T10:0{minute}:00Z")
    return bundles, ledger


def test_replay_refuses_a_bundle_edited_under_its_revision(decided: tuple[Path, Path], tmp_path: Path) -> None:
    bundles, ledger = decided
    honest = run_cli("audit", "replay", str(ledger), "--bundles", str(bundles), "--no-opa", "--format", "json")
    assert honest.returncode == 0 and json.loads(honest.stdout)["reproduced"] == {"regopy": 3}, honest.stderr
    _edit_keeping_the_revision(bundles / "finance.tar.gz")
    # The edited bundle is self-consistent: nothing inside it can tell (it is not signed) ...
    assert run_cli("inspect", str(bundles / "finance.tar.gz")).returncode == 0
    # ... but the entries name the bytes that decided, and these are not them.
    replayed = run_cli("audit", "replay", str(ledger), "--bundles", str(bundles), "--no-opa")
    assert replayed.returncode == 2, replayed.stdout
    assert "not the bundle that decided" in replayed.stderr and "sha256" in replayed.stderr
    assert replayed.stderr.count("\n") == 1, replayed.stderr
    entries = [json.loads(line) for line in ledger.read_text().splitlines()]
    decision_id = next(e["decision_id"] for e in entries if e.get("type") == "decision")
    exported = run_cli(
        "audit",
        "export",
        str(ledger),
        "--decision-id",
        decision_id,
        "--bundles",
        str(bundles),
        "-o",
        str(tmp_path / "x"),
    )
    assert exported.returncode == 2 and "not the bundle that decided" in exported.stderr


def test_a_content_revision_cannot_be_kept_for_other_content(tmp_path: Path) -> None:
    """The default revision is the content's digest: keeping it over edited content is refused on read."""
    bundle = tmp_path / "finance.tar.gz"
    compile_bundle([FINANCE / "knowledge.yaml"], FINANCE / "matrix.yaml", POLICIES, bundle)
    original = tmp_path / "original.tar.gz"
    shutil.copyfile(bundle, original)
    _edit_keeping_the_revision(bundle)
    for command in (("inspect", str(bundle)), ("eval", "-b", str(bundle), "data.kcp.controls.allowed_actors")):
        proc = run_cli(*command)
        assert proc.returncode == 2 and "does not name this content" in proc.stderr, (command, proc.stderr)
    assert run_cli("inspect", str(original)).returncode == 0
