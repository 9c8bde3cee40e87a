"""The auditor's tools over a ledger: export one decision, replay them all, query.

Replay takes each archived decision's ``input`` and the bundle revision it names, evaluates
``data.kcp.gate.decision`` again on regopy and (when installed) on the OPA reference engine,
and compares with the archived ``result``. Entries whose content was erased under no-logging
are replayed from what remains and reported apart if that is not enough to reproduce them. An
archived decision without a result (an engine error, a cross-check divergence) or with one that
is not a decision object is a failure, never "not evaluated": there is nothing to reproduce it
against, and that is what an auditor must look at.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kcp_opa.compile.bundle import LoadedBundle, peek_revision, read_bundle
from kcp_opa.compile.signatures import Verification
from kcp_opa.core.errors import BundleError, BundleProvenanceError, LedgerError
from kcp_opa.core.jsonread import JsonDict, JsonObject, mapping
from kcp_opa.decide.engine import DECISION_ENTRYPOINT, RegopyEngine
from kcp_opa.trail.entries import BUNDLE_NAME
from kcp_opa.trail.ledger import read_entries

if TYPE_CHECKING:
    from opa_bindings import OpaEngine

_README = """# Decision {decision_id} (ledger seq {seq})

Archived by kcp-opa on {timestamp}: {decision} ({authorization_status}), reasons {reasons}.
The bundle that decided it is `{bundle}` (revision `{revision}`, policy version {policy_version},
sha256 `{sha256}`{signer}).

Reproduce with the OPA reference (`opa eval`):

    opa eval -b {bundle} -i input.json 'data.kcp.gate.decision'

or without the opa binary (regopy; add `--engine opa` for OPA through its Python bindings):

    kcp-opa eval -b {bundle} -i input.json 'data.kcp.gate.decision'

Getting the opa binary: docs/auditing.md in the kcp-opa repository
(https://openpolicyagent.org/downloads/, OPA 1.0 or newer).

The value must equal `result.json` exactly.{erased_note}
"""


@dataclass(frozen=True)
class _Candidate:
    path: Path
    sha256: str
    revision: str
    refused: str | None  # why read_bundle refused it (tampered, unverified), None when it loads


class BundleIndex:
    """The bundles in a directory, by the sha256 of their bytes and by the revision they claim.

    An entry that names a sha256 is replayed only with the file of those bytes: a bundle that
    claims the entry's revision with other bytes is refused with one line that says so.
    Entries written before bundles were bound to bytes name only a revision and match by it.
    """

    def __init__(self, directory: str | Path, verification: Verification | None = None) -> None:
        self.directory = Path(directory)
        self.verification = verification
        self.candidates: list[_Candidate] = []
        for path in sorted(self.directory.glob("*.tar.gz")):
            try:
                digest = hashlib.sha256(path.read_bytes()).hexdigest()
            except OSError:
                continue
            try:
                revision, refused = read_bundle(path, verification=verification).revision, None
            except BundleError as exc:
                revision, refused = peek_revision(path), str(exc)
            self.candidates.append(_Candidate(path, digest, revision, refused))

    def find(self, revision: str, sha256: str | None, where: str) -> Path | None:
        """The bundle that decided ``where`` (an entry), None when the directory has no candidate."""
        if sha256:
            for candidate in self.candidates:
                if candidate.sha256 == sha256:
                    if candidate.refused is not None:
                        raise BundleProvenanceError(
                            f"{where}: its bundle {candidate.path} is refused: {candidate.refused}"
                        )
                    return candidate.path
            for candidate in self.candidates:
                if candidate.revision == revision:
                    raise BundleProvenanceError(
                        f"{where} names bundle revision {revision} with sha256 {sha256}; {candidate.path} claims that "
                        f"revision but its sha256 is {candidate.sha256}: not the bundle that decided, refused"
                    )
            return None
        for candidate in self.candidates:
            if candidate.revision == revision and candidate.refused is None:
                return candidate.path
        return None


def decision_entries(ledger: str | Path) -> Iterable[tuple[int, dict[str, Any]]]:
    return ((line, entry) for line, entry in read_entries(ledger) if entry.get("type") == "decision")


def bundle_ref(entry: JsonObject) -> tuple[str, str | None]:
    """The revision and (for entries bound to bytes) the sha256 of the bundle an entry names."""
    bundles = entry.get("bundles")
    if isinstance(bundles, Mapping):
        for value in bundles.values():
            if isinstance(value, Mapping) and isinstance(value.get("revision"), str):
                sha256 = value.get("sha256")
                return str(value["revision"]), sha256 if isinstance(sha256, str) and sha256 else None
    return "", None


def pick_decision(ledger: str | Path, decision_id: str, seq: int | None) -> dict[str, Any]:
    """The one decision entry to export: the only one for the id, or the one at ``seq``.

    A decision re-evaluated as control results arrive has several entries (PENDING_CONTROLS,
    then APPROVED); picking one silently would hide which state is being proved.
    """
    matches = [entry for _, entry in decision_entries(ledger) if entry.get("decision_id") == decision_id]
    if not matches:
        raise LedgerError(f"{ledger}: no decision {decision_id}")
    if seq is not None:
        chosen = [entry for entry in matches if entry.get("seq") == seq]
        if not chosen:
            seqs = ", ".join(str(entry.get("seq")) for entry in matches)
            raise LedgerError(f"{ledger}: decision {decision_id} has no entry at seq {seq} (its entries: {seqs})")
        return chosen[0]
    if len(matches) > 1:
        states = ", ".join(f"{entry.get('seq')} {entry.get('authorization_status')}" for entry in matches)
        raise LedgerError(
            f"{ledger}: decision {decision_id} has {len(matches)} entries (seq {states}); choose one with --seq,"
            " or take them all with `audit case`"
        )
    return matches[0]


def export_decision(
    ledger: str | Path,
    decision_id: str,
    bundles: str | Path,
    output: str | Path,
    *,
    seq: int | None = None,
    verification: Verification | None = None,
) -> Path:
    """Write input.json, result.json, the deciding bundle (bundle.tar.gz) and a README into ``output``.

    The bundle must be the bytes the entry names (its sha256): another file with the same
    revision is refused (:class:`BundleProvenanceError`).
    """
    entry = pick_decision(ledger, decision_id, seq)
    revision, sha256 = bundle_ref(entry)
    found = BundleIndex(bundles, verification).find(revision, sha256, f"seq {entry.get('seq')} decision {decision_id}")
    if found is None:
        named = f"sha256 {sha256}" if sha256 else f"revision {revision}"
        raise BundleError(f"no bundle with {named} in {bundles}; the decision names it")
    out = Path(output)
    out.mkdir(parents=True, exist_ok=True)
    bundle_name = "bundle.tar.gz"
    shutil.copyfile(found, out / bundle_name)
    (out / "input.json").write_text(json.dumps(entry["input"], indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    (out / "result.json").write_text(json.dumps(entry["result"], indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    erased = entry.get("erased") or []
    note = (
        f"\n\nUnder no-logging these input values were erased before archiving: {', '.join(erased)}."
        " The decision reproduces only if it did not depend on them."
        if erased
        else ""
    )
    (out / "README.md").write_text(
        _README.format(
            decision_id=decision_id,
            seq=entry.get("seq"),
            timestamp=entry.get("timestamp"),
            decision=entry.get("decision"),
            authorization_status=entry.get("authorization_status"),
            reasons=", ".join(entry.get("reason_codes") or []),
            bundle=bundle_name,
            revision=revision,
            sha256=sha256 or "not recorded by this entry",
            signer=f", signed by key `{entry['bundles'][BUNDLE_NAME].get('keyid')}`" if _signed(entry) else "",
            policy_version=(entry.get("labels") or {}).get("policy_version"),
            erased_note=note,
        ),
        encoding="utf-8",
    )
    return out


def _signed(entry: JsonObject) -> bool:
    named = mapping(entry.get("bundles")).get(BUNDLE_NAME)
    return isinstance(named, Mapping) and isinstance(named.get("keyid"), str)


@dataclass
class ReplayReport:
    decisions: int = 0
    reproduced: dict[str, int] = field(default_factory=dict)
    mismatches: list[JsonDict] = field(default_factory=list)
    erased_unverifiable: list[str] = field(default_factory=list)
    missing_bundles: dict[str, int] = field(default_factory=dict)
    engines: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return not self.mismatches and not self.missing_bundles

    def to_dict(self) -> JsonDict:
        return {
            "ok": self.ok,
            "decisions": self.decisions,
            "engines": list(self.engines),
            "reproduced": self.reproduced,
            "mismatches": self.mismatches,
            "erased_unverifiable": self.erased_unverifiable,
            "missing_bundles": self.missing_bundles,
        }


class _Engines:
    def __init__(self, bundle: LoadedBundle, with_opa: bool) -> None:
        self.regopy = RegopyEngine(bundle, DECISION_ENTRYPOINT, preflight=True)
        self.opa: OpaEngine | None = None
        if with_opa:
            try:
                from opa_bindings import OpaEngine
            except ImportError:
                return
            self.opa = OpaEngine()
            for name, source in sorted(bundle.modules.items()):
                self.opa.add_policy(name, source)
            self.opa.add_data(dict(bundle.data))

    def evaluate(self, input_doc: JsonObject) -> dict[str, object]:
        results: dict[str, object] = {}
        outcome = self.regopy.evaluate(input_doc)
        results["regopy"] = outcome.value if outcome.error is None else {"engine_error": outcome.error}
        if self.opa is not None:
            results["opa"] = self.opa.eval_document("kcp.gate.decision", dict(input_doc))
        return results


def replay(
    ledger: str | Path, bundles: str | Path, *, with_opa: bool = True, verification: Verification | None = None
) -> ReplayReport:
    """Re-evaluate every archived decision with the bundle it names, on both engines.

    An entry bound to bytes (``bundles.*.sha256``) is replayed only with that file; a bundle
    that claims its revision with other bytes stops the replay (:class:`BundleProvenanceError`).
    """
    index = BundleIndex(bundles, verification)
    engines: dict[Path, _Engines] = {}
    report = ReplayReport()
    for line, entry in decision_entries(ledger):
        report.decisions += 1
        revision, sha256 = bundle_ref(entry)
        found = index.find(revision, sha256, f"line {line} decision {entry.get('decision_id')}")
        if found is None:
            report.missing_bundles[revision] = report.missing_bundles.get(revision, 0) + 1
            continue
        if found not in engines:
            engines[found] = _Engines(read_bundle(found, verification=verification), with_opa)
        unusable = _unusable_result(entry)
        if unusable is not None:
            report.mismatches.append({"line": line, "decision_id": entry.get("decision_id"), **unusable})
            continue
        for engine, value in engines[found].evaluate(entry["input"]).items():
            if entry.get("erased"):
                # The archived input is partial (no-logging): even an equal result would only show
                # that the kept facts suffice, not that the decided input was this one.
                report.erased_unverifiable.append(f"line {line} {entry.get('decision_id')} ({engine})")
            elif value == entry["result"]:
                report.reproduced[engine] = report.reproduced.get(engine, 0) + 1
            else:
                report.mismatches.append(
                    {"line": line, "decision_id": entry.get("decision_id"), "engine": engine, "got": value}
                )
    report.engines = tuple(sorted(report.reproduced))
    return report


def _unusable_result(entry: JsonObject) -> JsonDict | None:
    """Why an archived result cannot be replayed against (None when it can)."""
    result = entry.get("result")
    if isinstance(result, Mapping) and isinstance(result.get("decision"), str):
        return None
    if "engine_results" in entry:
        return {"engine": "cross_check", "reason": "engine_divergence", "got": entry.get("engine_results")}
    if result is None:
        return {"engine": "archive", "reason": "result_missing", "got": {"engine_error": entry.get("engine_error")}}
    return {"engine": "archive", "reason": "result_unparsable", "got": result}


def entry_decision_id(entry: JsonObject) -> str | None:
    """The decision an entry belongs to: its own id, or the one its (refused) evidence names."""
    if isinstance(entry.get("decision_id"), str):
        return str(entry["decision_id"])
    evidence = entry.get("evidence")
    if isinstance(evidence, Mapping) and isinstance(evidence.get("decision_id"), str):
        return str(evidence["decision_id"])
    return None


def entry_agent(entry: JsonObject) -> str:
    """Whom a decision entry is attributed to, as reports show it: its ``agent_id`` (the
    authenticated principal), or the agent the action stated, marked, when no principal
    authenticated (``unauthenticated: true``, a ``kcp-opa decide`` ledger)."""
    agent = str(entry.get("agent_id") or "(none)")
    return f"{agent} (unauthenticated)" if entry.get("unauthenticated") is True else agent


def entry_principal(entry: JsonObject) -> str | None:
    """The authenticated principal of a service entry (refusals, notes), by id."""
    principal = entry.get("principal")
    if isinstance(principal, Mapping) and isinstance(principal.get("id"), str):
        return str(principal["id"])
    return principal if isinstance(principal, str) else None


def query(
    ledger: str | Path,
    *,
    unit: str | None = None,
    agent: str | None = None,
    model: str | None = None,
    decision: str | None = None,
    event_type: str | None = None,
    since: str | None = None,
    until: str | None = None,
    principal: str | None = None,
    code: str | None = None,
    decision_id: str | None = None,
) -> list[JsonDict]:
    """Entries matching every given filter (timestamps compare as RFC 3339 strings in UTC).

    ``decision_id`` also selects the refusals whose evidence named that decision; ``principal``
    matches the service principal of an entry or, failing that, its agent.
    """
    selected = []
    for _, entry in read_entries(ledger):
        if (
            unit is not None
            and entry.get("kcp_unit_applied") not in {unit}
            and not str(entry.get("kcp_unit_applied") or "").endswith(f"/{unit}")
        ):
            continue
        if agent is not None and entry.get("agent_id") != agent:
            continue
        if model is not None and entry.get("model") != model:
            continue
        if decision is not None and entry.get("decision") != decision:
            continue
        if event_type is not None and entry.get("type") != event_type:
            continue
        if principal is not None and (entry_principal(entry) or entry.get("agent_id")) != principal:
            continue
        if code is not None and entry.get("code") != code:
            continue
        if decision_id is not None and entry_decision_id(entry) != decision_id:
            continue
        stamp = str(entry.get("timestamp") or "")
        if since is not None and stamp < since:
            continue
        if until is not None and stamp > until:
            continue
        selected.append(entry)
    return selected
