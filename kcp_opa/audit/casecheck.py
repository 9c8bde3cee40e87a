"""Verify a decision case file offline: one named check per guarantee, every one must hold.

The checks, in order: ``files`` (each file's sha256 as case.json lists it), ``checkpoint`` (its
signature, under the key in the case or a pinned keyring, and the seq case.json names),
``chain`` (from seq 1 and the genesis link: each entry's hash recomputed, each link, the last
entry equal to the checkpoint), ``anchor`` (a newer checkpoint or head the auditor holds: a case
cut earlier fails; without one the results hold only up to the case's checkpoint), ``entries``
(the listed seqs are exactly the decision's entries in the chain), ``bundle`` (its content revision recomputed from its
bytes and equal to what every decision entry names), ``registry`` (the sha256 the bundle was
compiled with, and the pinned registry if given), ``inputs`` (the input and result files equal
the chained entries), ``attestations`` (each signed control result verifies under its issuer's
key from the registry, and is the one chained), ``replay-regopy`` / ``replay-opa`` (each
decision re-evaluated, canonical bytes compared), ``separation-of-duties`` (the policy's
``kcp.controls.verdict`` re-judges every attestation in order, on both engines) and ``receipt``
(its signature under a pinned receipt keyring, its fields equal to the chained receipt entry).

What is trusted: the checkpoint key, the registry and the receipt key. Pin them (``--keyring``,
``--trust``, ``--receipt-keyring``) with copies held apart from the case; without pins the case
proves only that it is self-consistent, and an unpinned receipt is a warning, never a pass.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kcp_opa.audit import case as layout
from kcp_opa.audit.auditor import _Engines, bundle_ref
from kcp_opa.audit.casepins import Pins as _Pins
from kcp_opa.audit.casepins import anchor as _anchor
from kcp_opa.audit.casepins import receipt as _receipt
from kcp_opa.audit.caseproofs import TreePins, checkpoint_of, entries_line, proven_entries, tree_checkpoint
from kcp_opa.audit.caseproofs import is_case_entry as _is_case_entry
from kcp_opa.audit.caseproofs import proofs as _proofs
from kcp_opa.authorize.attestations import verify_attestation
from kcp_opa.authorize.controls import EVIDENCE_ENTRYPOINT
from kcp_opa.authorize.documents import Attestation
from kcp_opa.authorize.parties import parties
from kcp_opa.compile.bundle import LoadedBundle, is_content_revision, read_bundle
from kcp_opa.compile.signatures import Verification
from kcp_opa.core.canonical import canonical_hash, canonical_json
from kcp_opa.core.errors import KcpOpaError
from kcp_opa.core.principalids import canonical_or_empty
from kcp_opa.core.signing import load_keyring
from kcp_opa.decide.engine import RegopyEngine
from kcp_opa.decide.gate import SYSTEM_CONTROLS
from kcp_opa.declare.trust import TrustRegistry, load_trust
from kcp_opa.trail.checkpoint import Checkpoint, read_checkpoint
from kcp_opa.trail.verify import GENESIS, entry_hash, is_header

_CHECK_ERRORS = (KcpOpaError, OSError, ValueError, KeyError, TypeError, AttributeError)


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool | None  # None: not applicable or not pinned (said why), never counted as a pass
    detail: str

    @property
    def warning(self) -> bool:
        """Not failed, not proved: the check ran against a key or cut only the case supplies."""
        return self.ok is None and self.detail.startswith(("not pinned", "not anchored"))

    def to_dict(self) -> dict[str, object]:
        return {"check": self.name, "ok": self.ok, "warning": self.warning, "detail": self.detail}


class _Case:
    """The case directory read lazily; any unreadable part fails the check that needs it."""

    def __init__(
        self,
        root: Path,
        trust: Path | None,
        keyring: Path | None,
        pins: _Pins,
        verification: Verification | None,
        tree_pins: TreePins,
    ) -> None:
        self.root, self.trust_pin, self.keyring_pin, self.pins = root, trust, keyring, pins
        self.tree_pins = tree_pins
        self.verification = verification  # the bundle signing keys the auditor holds (a signed bundle needs them)
        self.document: dict[str, Any] = json.loads((root / "case.json").read_text(encoding="utf-8"))
        if self.document.get("format") != layout.CASE_FORMAT:
            raise ValueError(f"format {self.document.get('format')!r}, not {layout.CASE_FORMAT}; gather the case again")
        self.decision_id = str(self.document["decision_id"])
        self.proven = self.document.get("anchor") == "tree"  # a proof case: entries with inclusion proofs
        self._bundle: LoadedBundle | None = None

    def json(self, name: str) -> Any:
        return json.loads((self.root / name).read_text(encoding="utf-8"))

    def chain(self) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
        if self.proven:
            raise ValueError("a proof case holds no chain: its entries are proven by inclusion instead")
        header, entries = None, []
        for number, line in enumerate((self.root / layout.CHAIN).read_bytes().splitlines()):
            item = json.loads(line)
            if is_header(item):
                if number:
                    raise ValueError(f"{layout.CHAIN}: a ledger header on line {number + 1}, not the first")
                header = item
            else:
                entries.append(item)
        return header, entries

    def case_entries(self) -> list[dict[str, Any]]:
        if self.proven:  # only entries whose inclusion proofs verify are read at all
            return proven_entries(self)
        seqs = set(self.document["seqs"])
        return [e for e in self.chain()[1] if e.get("seq") in seqs]

    def decisions(self) -> list[dict[str, Any]]:
        return [e for e in self.case_entries() if e.get("type") == "decision"]

    def bundle(self) -> LoadedBundle:
        if self._bundle is None:
            self._bundle = read_bundle(self.root / layout.BUNDLE, verification=self.verification)
        return self._bundle

    def registry(self) -> TrustRegistry:
        return load_trust(self.root / layout.REGISTRY)

    def checkpoint(self) -> Checkpoint:
        """The case's checkpoint, read strictly (LedgerError when it is not one)."""
        return read_checkpoint(self.json(layout.CHECKPOINT), layout.CHECKPOINT)

    def cut(self) -> str:
        """Where the case's evidence stops: every "none" a check reports holds only up to here."""
        if self.proven:
            return f"among the entries this case proves (tree of {checkpoint_of(self).size})"
        checkpoint = self.checkpoint()
        return f"up to seq {checkpoint.seq} (checkpoint at {checkpoint.time})"


def _files(case: _Case) -> str:
    listed: Mapping[str, str] = case.document["files"]
    if case.proven:  # a proof case holds its decision only: nothing it does not list
        held = {str(p.relative_to(case.root)) for p in case.root.rglob("*") if p.is_file()} - {"case.json"}
        if held - set(listed):
            raise ValueError(f"files case.json does not list: {', '.join(sorted(held - set(listed)))}")
    for name, digest in sorted(listed.items()):
        if hashlib.sha256((case.root / name).read_bytes()).hexdigest() != digest:
            raise ValueError(f"{name}: sha256 differs from case.json")
    return f"{len(listed)} files match case.json"


def _checkpoint(case: _Case) -> str:
    keyring = load_keyring(case.keyring_pin or case.root / layout.CHECKPOINT_KEYS)
    checkpoint = case.checkpoint()
    checkpoint.verify(keyring)
    if case.document.get("checkpoint_seq") != checkpoint.seq:
        named = case.document.get("checkpoint_seq")
        raise ValueError(f"case.json names checkpoint seq {named}, not the checkpoint's {checkpoint.seq}")
    pinned = "pinned keyring" if case.keyring_pin else "the case's key (not pinned)"
    return f"seq {checkpoint.seq} signed by {checkpoint.signature.kid}, verified with {pinned}"


def _chain(case: _Case) -> str:
    header, entries = case.chain()
    checkpoint = case.checkpoint()
    first = canonical_hash(header) if header is not None else GENESIS  # a headed ledger chains its header
    if not entries or entries[0].get("seq") != 1 or entries[0].get("previous_hash") != first:
        hidden = "earlier entries may be hidden"
        raise ValueError(f"the chain does not start at seq 1 linked to the ledger's header; {hidden}")
    previous: str | None = None
    for entry in entries:
        if entry.get("entry_hash") != entry_hash(entry):
            raise ValueError(f"seq {entry.get('seq')}: entry_hash does not match its content")
        if previous is not None and entry.get("previous_hash") != previous:
            raise ValueError(f"seq {entry.get('seq')}: previous_hash does not link to the entry before")
        previous = str(entry["entry_hash"])
    seqs = [int(e["seq"]) for e in entries]
    if seqs != list(range(seqs[0], seqs[0] + len(seqs))):
        raise ValueError("the segment's seqs are not consecutive")
    last = entries[-1]
    if last["seq"] != checkpoint.seq or last["entry_hash"] != checkpoint.entry_hash:
        raise ValueError(f"the segment ends at seq {last['seq']}, not at the checkpoint's entry")
    ledger_id = header.get("ledger_id") if header else None
    if checkpoint.ledger_id != ledger_id or case.document.get("ledger_id") != ledger_id:
        raise ValueError("the header, the checkpoint and case.json name different ledgers")
    return f"seq 1..{seqs[-1]} recomputed, linked from the ledger's header to the checkpoint"


def _entries(case: _Case) -> str:
    _, entries = case.chain()
    receipts = {
        str(e["receipt_id"])
        for e in entries
        if e.get("type") == "receipt" and e.get("decision_id") == case.decision_id and e.get("receipt_id")
    }
    found = [int(e["seq"]) for e in entries if _is_case_entry(e, case.decision_id, receipts)]
    if found != list(case.document["seqs"]):
        raise ValueError(f"the chain holds entries {found} for the decision, case.json lists {case.document['seqs']}")
    return f"{len(found)} entries of {case.decision_id}, none left out {case.cut()}"


def _bundle(case: _Case) -> str:
    # read_bundle: format, limits, the .manifest's file hashes, the signature when keys are given,
    # and a content-derived revision recomputed from the members (compile's own rule).
    bundle = case.bundle()
    if not is_content_revision(bundle.revision):
        raise ValueError(f"the bundle's revision {bundle.revision!r} does not name its content")
    refs = {bundle_ref(e) for e in case.decisions()}
    named = {revision for revision, _ in refs}
    if named != {bundle.revision}:
        raise ValueError(f"the bundle's content is revision {bundle.revision[:12]}, the decisions name {sorted(named)}")
    digests = {sha256 for _, sha256 in refs if sha256}
    if digests and digests != {bundle.sha256}:
        raise ValueError(f"the bundle's bytes are sha256 {bundle.sha256[:12]}, the decisions name {sorted(digests)}")
    return f"revision {bundle.revision[:12]} recomputed from the bytes; every decision names it and its sha256"


def _registry(case: _Case) -> str:
    registry = case.registry()
    compiled = case.bundle().manifest["metadata"]["kcp_opa"]["trust"]["sha256"]
    if registry.sha256 != compiled:
        raise ValueError("trust/registry.yaml is not the registry the bundle was compiled with")
    if case.trust_pin is not None and load_trust(case.trust_pin).sha256 != registry.sha256:
        raise ValueError(f"trust/registry.yaml differs from the pinned {case.trust_pin}")
    return f"sha256 {registry.sha256[:12]} as compiled into the bundle" + (", and pinned" if case.trust_pin else "")


def _inputs(case: _Case) -> str:
    decisions = case.decisions()
    for entry in decisions:
        for part in ("input", "result"):
            if canonical_json(case.json(f"decisions/{entry['seq']:06d}-{part}.json")) != canonical_json(entry[part]):
                raise ValueError(f"decisions/{entry['seq']:06d}-{part}.json differs from the chained entry")
    final = decisions[-1]
    if canonical_json(case.json("input.json")) != canonical_json(final["input"]):
        raise ValueError("input.json differs from the final decision entry")
    if canonical_json(case.json("result.json")) != canonical_json(final["result"]):
        raise ValueError("result.json differs from the final decision entry")
    return f"{len(decisions)} inputs and results equal the chained entries"


def _attestations(case: _Case) -> str:
    registry, keys = case.registry(), case.json(layout.ISSUER_KEYS)
    controls = [e for e in case.case_entries() if e.get("type") == "control"]
    for entry in controls:
        item = case.json(f"attestations/{entry['seq']:06d}-{entry['evidence']['control']}.json")
        if canonical_json(item) != canonical_json(layout.attestation_of(entry["evidence"])):
            raise ValueError(f"seq {entry['seq']}: the attestation file is not the one chained")
        attestation = Attestation.from_dict(item)
        issuer, kid = attestation.issuer, attestation.signature.kid
        registered = registry.issuer(issuer)
        listed = keys.get(issuer, {}).get(kid)
        if (
            registered is None
            or listed is None
            or dict(registered.keys.get(kid) or {}).get("public_key") != listed.get("public_key")
        ):
            raise ValueError(f"seq {entry['seq']}: {issuer}'s key {kid} differs from the registry's")
        try:
            verify_attestation(item, registry, None)
        except KcpOpaError as exc:
            raise ValueError(f"seq {entry['seq']} {attestation.control}: {exc}") from None
    return f"{len(controls)} signed control results verify under their issuers' registered keys"


def _judge_engines(bundle: LoadedBundle, with_opa: bool) -> dict[str, Callable[[Mapping[str, object]], object]]:
    regopy = RegopyEngine(bundle, EVIDENCE_ENTRYPOINT, preflight=False)
    engines: dict[str, Callable[[Mapping[str, object]], object]] = {"regopy": lambda doc: regopy.evaluate(doc).value}
    if with_opa:
        from opa_bindings import OpaEngine

        opa = OpaEngine()
        for name, source in sorted(bundle.modules.items()):
            opa.add_policy(name, source)
        opa.add_data(dict(bundle.data))
        engines["opa"] = lambda doc: opa.eval_document("kcp.controls.verdict", doc)
    return engines


def _separation_of_duties(case: _Case, with_opa: bool) -> str:
    decisions = case.decisions()
    final = decisions[-1]
    action, result = final["input"]["action"], final["result"]
    controls = [e for e in case.case_entries() if e.get("type") == "control"]
    registry = case.registry()
    satisfied: list[str] = []
    for engine, judge in _judge_engines(case.bundle(), with_opa).items():
        prior: list[dict[str, str]] = []
        satisfied = []
        for entry in controls:
            item = layout.attestation_of(entry["evidence"])
            attested = verify_attestation(item, registry, None)
            verdict = judge(
                {
                    "evidence": {**attested.signed, "actor_id": attested.actor_id},
                    "issuer": attested.issuer,
                    "prior": list(prior),
                    "action": action,
                    "subject": canonical_or_empty(action.get("subject_id")),
                    "parties": parties(action),
                    "required_controls": list(result.get("required_controls") or []),
                    "approver_roles": list(result.get("approver_roles") or []),
                }
            )
            if not isinstance(verdict, Mapping) or verdict.get("accepted") is not True:
                code = verdict.get("code") if isinstance(verdict, Mapping) else "no verdict"
                raise ValueError(f"{engine}: the policy refuses seq {entry['seq']} {attested.control} ({code})")
            prior.append({"control": attested.control, "status": attested.status})
            satisfied = [str(c) for c in verdict.get("satisfied") or []]
    claimed = set(final["input"]["context"]["satisfied_controls"])
    if claimed - set(satisfied) - set(SYSTEM_CONTROLS) or set(satisfied) - claimed:
        raise ValueError(f"the policy satisfies {sorted(satisfied)}; the final input claimed {sorted(claimed)}")
    engines = "regopy and OPA" if with_opa else "regopy"
    return f"{len(controls)} control results accepted in order by kcp.controls.verdict on {engines}"


def _replay(case: _Case, engine: str) -> str:
    engines = _Engines(case.bundle(), with_opa=engine == "opa")
    if engine == "opa" and engines.opa is None:
        raise ValueError("the OPA reference engine is not installed (pip install opa-golib-python-bindings)")
    count = 0
    for entry in case.decisions():
        if entry.get("erased"):
            raise ValueError(f"seq {entry['seq']}: content erased under no-logging; not reproducible")
        value = engines.evaluate(entry["input"])[engine]
        if canonical_json(value) != canonical_json(entry["result"]):
            raise ValueError(f"seq {entry['seq']}: {engine} returns other bytes than the archived result")
        count += 1
    return f"{count} decisions reproduce byte for byte"


_NOT_ON_ENTRIES = {"files", "tree-checkpoint", "proofs", "entries", "registry"}


def verify_case(
    root: str | Path,
    *,
    trust: Path | None = None,
    keyring: Path | None = None,
    with_opa: bool = True,
    receipt_keyring: Path | None = None,
    checkpoint: Path | None = None,
    expect_head: int | None = None,
    verification: Verification | None = None,
    tree_pins: TreePins | None = None,
) -> list[Check]:
    """Every check, in order; a check that cannot run (a missing or unreadable part) fails.

    A proof case (``anchor: tree``) runs ``tree-checkpoint`` and ``proofs`` in place of
    ``checkpoint``, ``chain`` and ``anchor``; every later check reads only proven entries and
    says so."""
    try:
        pins = _Pins(receipt_keyring, checkpoint, expect_head)
        case = _Case(Path(root), trust, keyring, pins, verification, tree_pins or TreePins())
    except _CHECK_ERRORS as exc:
        return [Check("case", False, f"case.json unreadable: {exc}")]
    steps: list[tuple[str, Callable[[], str | tuple[bool | None, str]]]] = [("files", lambda: _files(case))]
    if case.proven:
        if checkpoint is not None or expect_head is not None or keyring is not None:
            return [Check("case", False, "a proof case is pinned with --log-key and --witness-key, not --keyring")]
        steps += [
            ("tree-checkpoint", lambda: tree_checkpoint(case)),
            ("proofs", lambda: _proofs(case, _is_case_entry)),
            ("entries", lambda: entries_line(case)),
        ]
    elif tree_pins is not None and (tree_pins.log_key or tree_pins.witness_keys or tree_pins.witnesses):
        return [
            Check("case", False, "a chain case has no tree checkpoint: --log-key and --witness-key pin a proof case")
        ]
    else:
        steps += [
            ("checkpoint", lambda: _checkpoint(case)),
            ("chain", lambda: _chain(case)),
            ("anchor", lambda: _anchor(case)),
            ("entries", lambda: _entries(case)),
        ]
    steps += [
        ("bundle", lambda: _bundle(case)),
        ("registry", lambda: _registry(case)),
        ("inputs", lambda: _inputs(case)),
        ("attestations", lambda: _attestations(case)),
        ("replay-regopy", lambda: _replay(case, "regopy")),
    ]
    if with_opa:
        steps.append(("replay-opa", lambda: _replay(case, "opa")))
    steps.append(("separation-of-duties", lambda: _separation_of_duties(case, with_opa)))
    steps.append(("receipt", lambda: _receipt(case)))
    checks: list[Check] = []
    for name, step in steps:
        try:
            outcome = step()
        except _CHECK_ERRORS as exc:
            checks.append(Check(name, False, str(exc)))
            continue
        ok, detail = outcome if isinstance(outcome, tuple) else (True, outcome)
        if case.proven and name not in _NOT_ON_ENTRIES:
            detail += " [on entries proven by inclusion]"
        checks.append(Check(name, ok, detail))
    return checks
