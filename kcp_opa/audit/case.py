"""A decision case file: everything about one decision, gathered so it proves itself offline.

``audit case LEDGER DECISION_ID`` writes, into one directory: the ledger from its header and
seq 1 (linked to the header) to a signed checkpoint (``chain.jsonl``), so each entry's hash and
its link to the checkpoint can be recomputed and no entry of the decision can be left out (a
segment starting at a later entry could hide the first ones); every decision entry's archived
input and result; the bundle that decided it (``bundle.tar.gz``, the name the docs use); the
trust registry the bundle was compiled with (its sha256 is in the bundle's metadata); each
signed control attestation with its issuer's public key; the checkpoint and the public key that
verifies it (kcp_opa.audit.caseanchor picks it); for a signed bundle, the public key it verified
under (so the README's commands run as written); and, when given, the receipt and its public
key. ``case.json`` lists the files with their sha256 and the seqs of the decision's entries.
``casecheck`` verifies it. With ``proofs`` the case carries, in place of the chain and the
checkpoint, only the decision's entries with inclusion proofs to a tree checkpoint
(kcp_opa.audit.caseproofs): no other decision's data.

Only public keys are written: Ed25519 public halves from the registry and the keyrings. An
issuer with an HMAC key cannot be checked offline; verify says so rather than passing it.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from kcp_opa.audit.auditor import BundleIndex, bundle_ref
from kcp_opa.audit.caseanchor import anchor_checkpoint
from kcp_opa.audit.caseproofs import ANCHOR, of_decision, pretty, proof_files
from kcp_opa.audit.casereadme import BUNDLE_KEY, bundle_key, render_readme
from kcp_opa.authorize.documents import Receipt
from kcp_opa.compile.bundle import read_bundle
from kcp_opa.compile.signatures import Verification
from kcp_opa.core.canonical import canonical_json
from kcp_opa.core.errors import BundleError, LedgerError
from kcp_opa.core.jsonread import JsonDict, JsonObject, mapping
from kcp_opa.core.signing import Keyring
from kcp_opa.declare.trust import TrustRegistry, load_trust
from kcp_opa.trail.verify import is_header, verify_ledger

CASE_FORMAT = "kcp-opa-case/2"  # /1 carried a segment from the decision's first entry
CHAIN = "chain.jsonl"
BUNDLE = "bundle.tar.gz"
REGISTRY = "trust/registry.yaml"
ISSUER_KEYS = "keys/issuers.json"
CHECKPOINT = "checkpoint.json"
CHECKPOINT_KEYS = "keys/checkpoint.json"
RECEIPT = "receipt.json"
RECEIPT_KEYS = "keys/receipt.json"


def _read_lines(ledger: Path) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
    header: dict[str, Any] | None = None
    entries: list[dict[str, Any]] = []
    with ledger.open("rb") as handle:
        for raw in handle:
            if not raw.strip():
                continue
            item = json.loads(raw)
            if is_header(item):
                header = item
            else:
                entries.append(item)
    return header, entries


def _public_keyring(keyring: Keyring, kids: Sequence[str]) -> JsonDict:
    public = keyring.public()
    wanted = {kid: key for kid, key in public.keys.items() if kid in kids}
    if len(wanted) != len(set(kids)):
        missing = sorted(set(kids) - set(wanted))
        raise LedgerError(f"no Ed25519 public key for {', '.join(missing)} in the keyring")
    return Keyring(wanted, None).to_file_dict(include_private=False)


def _issuer_keys(registry: TrustRegistry, attestations: Sequence[JsonObject]) -> dict[str, JsonDict]:
    """Each attesting issuer's registry entry for the kid it signed with (public parts only)."""
    keys: dict[str, JsonDict] = {}
    for item in attestations:
        issuer = registry.issuer(str(item.get("issuer")))
        kid = str(mapping(item.get("signature")).get("kid"))
        entry = issuer.keys.get(kid) if issuer is not None else None
        if issuer is None or entry is None:
            continue
        keys.setdefault(issuer.id, {})[kid] = {k: v for k, v in entry.items() if k in {"alg", "public_key", "kid"}}
    return keys


def attestation_of(evidence: JsonObject) -> JsonDict:
    """The signed attestation as the issuer signed it: the logged item without the registry's actor_type."""
    return {key: value for key, value in evidence.items() if key != "actor_type"}


def build_case(
    ledger: str | Path,
    decision_id: str,
    output: str | Path,
    *,
    bundles: str | Path,
    trust: str | Path,
    keyring: Keyring | None = None,
    checkpoints: Sequence[Path] = (),
    receipt: Receipt | None = None,
    receipt_keyring: Keyring | None = None,
    verification: Verification | None = None,
    proofs: bool = False,
    tree_checkpoint: Path | None = None,
    log_key: str | None = None,
) -> dict[str, Any]:
    """Write the case directory for ``decision_id`` and return its ``case.json`` document.

    ``verification``: the keys a signed bundle must verify with (as for ``audit replay``).
    ``proofs``: carry only the decision's entries, each with an inclusion proof to a tree
    checkpoint (``tree_checkpoint`` under ``log_key``, or one signed now by ``keyring``), not the
    ledger prefix (kcp_opa.audit.caseproofs)."""
    if not proofs and (tree_checkpoint is not None or log_key is not None):
        raise LedgerError("--tree-checkpoint and --log-key anchor a proof case: add --proofs")
    if proofs and checkpoints:
        raise LedgerError("--checkpoint anchors a chain case; a --proofs case takes --tree-checkpoint")
    path = Path(ledger)
    report = verify_ledger(path)
    if not report.ok:
        problem = report.problems[0]
        raise LedgerError(f"{path}:{problem.line}: {problem.message}; a broken ledger makes no case")
    header, entries = _read_lines(path)
    case_entries = of_decision(entries, decision_id)
    decisions = [e for e in case_entries if e.get("type") == "decision"]
    if not decisions:
        raise LedgerError(f"{path}: no decision {decision_id}")
    refs = {bundle_ref(e) for e in decisions}
    if len(refs) != 1:
        named = ", ".join(sorted(f"{r} ({s or 'no sha256'})" for r, s in refs))
        raise BundleError(f"decision {decision_id} names several bundles: {named}")
    revision, sha256 = refs.pop()
    found = BundleIndex(bundles, verification).find(revision, sha256, f"decision {decision_id}")
    if found is None:
        raise BundleError(f"no bundle with {f'sha256 {sha256}' if sha256 else f'revision {revision}'} in {bundles}")
    registry = load_trust(trust)
    loaded = read_bundle(found, verification=verification)
    bundle_trust = (loaded.manifest.get("metadata") or {}).get("kcp_opa", {}).get("trust")
    if not isinstance(bundle_trust, Mapping) or bundle_trust.get("sha256") != registry.sha256:
        raise BundleError(f"{trust} is not the trust registry bundle {revision[:12]} was compiled with")
    seqs = [int(e["seq"]) for e in case_entries]
    files: dict[str, bytes] = {}
    if proofs:
        files, tree = proof_files(path, seqs, keyring, tree_checkpoint, log_key)
        anchored_seq, anchored = tree.size, f"proven by inclusion in a tree checkpoint of {tree.size} entries"
        pins = "--log-key log.vkey --witness-key witness.vkey --witnesses 1"
    else:
        checkpoint, checkpoint_keys = anchor_checkpoint(
            path,
            (report.ledger_id, report.head_seq, report.head_hash),
            max(seqs),
            {int(e["seq"]): str(e.get("entry_hash")) for e in entries},
            checkpoints,
            keyring,
            receipt_keyring,
        )
        segment = [e for e in entries if int(e["seq"]) <= checkpoint.seq]  # the whole prefix: see above
        files[CHAIN] = b"".join(canonical_json(item) + b"\n" for item in ([header] if header else []) + segment)
        files[CHECKPOINT] = pretty(checkpoint.to_dict())
        files[CHECKPOINT_KEYS] = pretty(_public_keyring(checkpoint_keys, [checkpoint.signature.kid]))
        anchored_seq = checkpoint.seq
        anchored = f"anchored by a checkpoint of seq {checkpoint.seq} signed by `{checkpoint.signature.kid}`"
        pins = "--keyring checkpoint-public.json --checkpoint newer-checkpoint.json"

    out = Path(output)
    if out.exists() and any(out.iterdir()):
        raise LedgerError(f"{out} exists and is not empty; a case is written into a new directory")
    for entry in decisions:
        files[f"decisions/{entry['seq']:06d}-input.json"] = pretty(entry["input"])
        files[f"decisions/{entry['seq']:06d}-result.json"] = pretty(entry["result"])
    files["input.json"], files["result.json"] = pretty(decisions[-1]["input"]), pretty(decisions[-1]["result"])
    controls = [e for e in case_entries if e.get("type") == "control" and isinstance(e.get("evidence"), Mapping)]
    attestations = [attestation_of(e["evidence"]) for e in controls]
    for entry, item in zip(controls, attestations, strict=True):
        files[f"attestations/{entry['seq']:06d}-{item.get('control')}.json"] = pretty(item)
    files[ISSUER_KEYS] = pretty(_issuer_keys(registry, attestations))
    files[REGISTRY] = Path(registry.file).read_bytes()
    files[BUNDLE] = found.read_bytes()
    if receipt is not None:
        if receipt_keyring is None:
            raise LedgerError("a receipt needs the keyring whose public key verifies it")
        files[RECEIPT] = pretty(receipt.to_dict())
        files[RECEIPT_KEYS] = pretty(_public_keyring(receipt_keyring, [receipt.signature.kid]))
    created = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    signed = bundle_key(loaded, verification)
    if signed is not None:
        files[BUNDLE_KEY] = signed.pem
    files["README.md"] = render_readme(
        decision_id=decision_id,
        ledger_id=report.ledger_id,
        created_at=created,
        seqs=seqs,
        seq=anchored_seq,
        anchored=anchored,
        pins=pins,
        proven=proofs,
        bundle=BUNDLE,
        signed=signed,
    )
    for sub in (
        "decisions",
        "attestations",
        "keys",
        "trust",
        *(("entries", "proofs") if proofs else ()),
    ):  # only now: a refused case leaves nothing
        (out / sub).mkdir(parents=True, exist_ok=True)
    for name, content in files.items():
        (out / name).write_bytes(content)
    document = {
        "format": CASE_FORMAT,
        "decision_id": decision_id,
        "ledger_id": report.ledger_id,
        "created_at": created,
        "bundle_revision": revision,
        "seqs": seqs,
        **({"anchor": ANCHOR} if proofs else {}),
        "checkpoint_seq": anchored_seq,
        "files": {name: hashlib.sha256(content).hexdigest() for name, content in sorted(files.items())},
    }
    (out / "case.json").write_bytes(pretty(document))
    return document
