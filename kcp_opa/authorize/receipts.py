"""Signed one-time delegation receipts: issue only for an approved decision, verify in order.

Field for field the KYA v2.0 receipt: the signature is over the canonical JSON (KYA-CJ-1) of
the receipt with only ``signature.value`` removed, so ``alg`` and ``kid`` are signed too.
Verification runs the contract's checks in its order and stops at the first failure, each
with its own code; the last step consumes the nonce atomically in a :class:`~kcp_opa.stores.protocols.NonceStore`.
"""

from __future__ import annotations

import datetime as dt
import re
import secrets
import uuid
from collections.abc import Collection, Mapping
from dataclasses import dataclass

from kcp_opa.authorize.documents import BOUND_FIELDS, RECEIPT_SCHEMA_VERSION, Receipt
from kcp_opa.core.canonical import canonical_hash
from kcp_opa.core.documents import Signature
from kcp_opa.core.errors import MalformedDocumentError, ReceiptIssueError, ReceiptVerificationError
from kcp_opa.core.jsonread import JsonObject, items, mapping, objects, strings, text
from kcp_opa.core.signing import ALGORITHMS, Keyring, Signer, document_verifies, signed_bytes
from kcp_opa.decide.action import action_hash
from kcp_opa.decide.checked import CheckedAction
from kcp_opa.stores.protocols import NonceStore

SCHEMA_VERSION = RECEIPT_SCHEMA_VERSION
MIN_TTL_SECONDS, MAX_TTL_SECONDS, DEFAULT_TTL_SECONDS = 30, 900, 300
CLOCK_SKEW_SECONDS = 60
HOLDS = frozenset({"DENY", "COMPLIANCE_REVIEW", "ESCALATE"})
_NONCE = re.compile(r"^[0-9a-f]{32,}$")
_TIME = "%Y-%m-%dT%H:%M:%SZ"
__all__ = ["issue_for_checked_decision", "verify_receipt"]


#: The bytes a receipt's signature covers (the receipt with only ``signature.value`` removed).
signing_bytes = signed_bytes


def _utc(moment: dt.datetime | None) -> dt.datetime:
    moment = moment or dt.datetime.now(dt.UTC)
    if moment.tzinfo is None:
        raise ValueError("times must carry a timezone")
    return moment.astimezone(dt.UTC).replace(microsecond=0)


def issue_for_checked_decision(
    decision: JsonObject,
    action: JsonObject,
    key: Signer,
    *,
    ttl_seconds: int | None = None,
    now: dt.datetime | None = None,
    decision_hash: str | None = None,
    unsigned_decision: bool = False,
) -> Receipt:
    """Sign a receipt for ``action`` under a decision document the caller has authenticated.

    Not the library's entry point (``kcp_opa.issue_receipt`` takes only a decision its desk
    sealed): called after the desk's seal and re-derivation (``ControlDesk.issue``) or after
    another gate's signature verified (``issue_for_foreign_decision``). Refused
    (:class:`ReceiptIssueError`) unless the decision is APPROVED, no DENY, COMPLIANCE_REVIEW or
    ESCALATE stands, nothing is blocked, and every required control has PASSED evidence bound to
    this decision and action.
    """
    digest = action_hash(action)
    if decision.get("action_hash") != digest:
        raise ReceiptIssueError("the decision is for another action (action hash differs)", "action_mismatch")
    if decision.get("decision") in HOLDS:
        raise ReceiptIssueError(f"a {decision.get('decision')} stands; no receipt can be issued", "hold_stands")
    if decision.get("authorization_status") != "APPROVED":
        raise ReceiptIssueError(
            f"authorization_status is {decision.get('authorization_status')}, not APPROVED", "not_approved"
        )
    if decision.get("blocked_actions"):
        raise ReceiptIssueError(f"blocked actions: {decision.get('blocked_actions')}", "blocked")
    required = sorted(set(strings(decision.get("required_controls"))))
    evidence = objects(decision.get("control_evidence"))
    passed = {
        e.get("control")
        for e in evidence
        if e.get("status") == "PASSED"
        and e.get("action_hash") == digest
        and e.get("decision_id") == decision.get("decision_id")
    }
    missing = [c for c in required if c not in passed]
    if missing:
        raise ReceiptIssueError(_why_missing(missing, decision, digest), "controls_missing")
    ttl = DEFAULT_TTL_SECONDS if ttl_seconds is None else ttl_seconds
    declared = decision.get("receipt_ttl_seconds")
    if isinstance(declared, int) and ttl_seconds is None:
        ttl = declared
    if not MIN_TTL_SECONDS <= ttl <= MAX_TTL_SECONDS:
        raise ReceiptIssueError(f"ttl {ttl} s is outside {MIN_TTL_SECONDS}..{MAX_TTL_SECONDS}", "ttl_out_of_range")
    issued = _utc(now)
    approvers = sorted(
        {
            str(e.get("actor_id"))
            for e in evidence
            if e.get("control") == "independent_human_approval" and e.get("status") == "PASSED"
        }
    )
    decision_id, policy_version = decision.get("decision_id"), decision.get("policy_version")
    if not isinstance(decision_id, str) or not isinstance(policy_version, str):
        raise ReceiptIssueError("the decision lacks decision_id or policy_version", "malformed_decision")
    values = [action.get(name) for name in BOUND_FIELDS]
    if not all(value is None or isinstance(value, str) for value in values):
        raise ReceiptIssueError("the action's bound fields must be strings", "malformed_action")
    receipt = Receipt(
        receipt_id=f"rcpt_{uuid.uuid4().hex}",
        decision_id=decision_id,
        decision_hash=decision_hash or canonical_hash(decision),
        action_hash=digest,
        bound=tuple((name, text(value)) for name, value in zip(BOUND_FIELDS, values, strict=True)),
        policy_version=policy_version,
        required_controls=tuple(required),
        satisfied_controls=tuple(sorted(set(required) & passed)),
        control_evidence_hash=canonical_hash(evidence),
        approver_ids=tuple(approvers),
        issued_at=issued.strftime(_TIME),
        expires_at=(issued + dt.timedelta(seconds=ttl)).strftime(_TIME),
        nonce=secrets.token_hex(16),
        signature=Signature(key.alg, key.kid, ""),
        # signed with the rest: a verifier and an auditor see what the issuer accepted
        decision_authentication="unsigned" if unsigned_decision else None,
    )
    return receipt.signed_by(key)


def _why_missing(missing: list[str], decision: JsonObject, digest: str) -> str:
    """Name the item and the binding it lacks, not just the control (a KYA document's items carry
    no per-item ``decision_id``/``action_hash``; name the gate as trusted to bind them)."""
    listed = items(decision.get("control_evidence"))
    reasons = []
    for control in missing:
        reason = f"no PASSED evidence for {control}"
        for number, item in enumerate(listed, start=1):
            if not isinstance(item, Mapping) or item.get("control") != control or item.get("status") != "PASSED":
                continue
            label = f"evidence item {number} ({control})"
            if "decision_id" not in item:
                reason = f"{label} lacks decision_id binding"
            elif "action_hash" not in item:
                reason = f"{label} lacks action_hash binding"
            elif item.get("decision_id") != decision.get("decision_id"):
                reason = f"{label} is bound to another decision"
            elif item.get("action_hash") != digest:
                reason = f"{label} is bound to another action"
            break
        reasons.append(reason)
    return "; ".join(reasons)


@dataclass(frozen=True)
class VerifiedReceipt:
    receipt: Receipt
    consumed: bool


def verify_receipt(
    receipt: object,
    action: JsonObject | CheckedAction,
    *,
    keyring: Keyring,
    policy_versions: Collection[str],
    nonce_store: NonceStore | None,
    now: dt.datetime | None = None,
) -> VerifiedReceipt:
    """Verify in the contract's order; the first failure raises with its code.

    algorithm -> kid trusted -> signature -> schema and one-time flag -> policy version ->
    action hash -> bound fields (tenant first) -> required controls covered -> time ->
    nonce format -> atomic consume (skipped when ``nonce_store`` is None: verify only).
    """
    if isinstance(receipt, Receipt):  # a receipt held in-process is checked as the JSON it is sent as
        receipt = receipt.to_dict()
    if not isinstance(receipt, Mapping):
        raise ReceiptVerificationError("a receipt is a JSON object", "malformed_receipt")
    _check_well_formed(receipt)
    signature = mapping(receipt.get("signature"))
    alg, kid, value = signature.get("alg"), signature.get("kid"), signature.get("value")
    if alg not in ALGORITHMS:
        raise ReceiptVerificationError(f"unsupported signature algorithm {alg!r}", "unsupported_algorithm")
    key = keyring.verifier(kid) if isinstance(kid, str) else None
    if key is None or key.alg != alg:
        raise ReceiptVerificationError(f"signer {kid!r} is not trusted for {alg}", "signer_mismatch")
    if not isinstance(value, str) or not document_verifies(receipt, key):
        raise ReceiptVerificationError("signature does not verify", "bad_signature")
    try:
        read = Receipt.from_dict(receipt)
    except MalformedDocumentError as exc:
        raise ReceiptVerificationError(str(exc), "malformed_receipt") from None
    if read.policy_version not in policy_versions:
        raise ReceiptVerificationError(
            f"policy version {read.policy_version} is not active ({', '.join(sorted(policy_versions))})",
            "policy_mismatch",
        )
    if read.action_hash != action_hash(action):
        raise ReceiptVerificationError("the action was changed after approval (hash differs)", "action_mismatch")
    if read.tenant_id != action.get("tenant_id"):
        raise ReceiptVerificationError("the receipt is for another tenant", "tenant_mismatch")
    for name, value in read.bound:
        if value != action.get(name):
            raise ReceiptVerificationError(f"{name} differs between receipt and action", "bound_field_mismatch")
    if not set(read.required_controls) <= set(read.satisfied_controls):
        raise ReceiptVerificationError("not every required control is satisfied", "controls_not_covered")
    moment = _utc(now)
    issued, expires = _parse_time(read.issued_at), _parse_time(read.expires_at)
    if issued > moment + dt.timedelta(seconds=CLOCK_SKEW_SECONDS):
        raise ReceiptVerificationError("issued_at is in the future", "not_yet_valid")
    if expires <= issued:
        raise ReceiptVerificationError("expires_at is not after issued_at", "invalid_validity")
    if expires - issued > dt.timedelta(seconds=MAX_TTL_SECONDS):  # the contract's cap, whoever signed it
        raise ReceiptVerificationError(
            f"valid for {int((expires - issued).total_seconds())} s, over the {MAX_TTL_SECONDS} s cap", "ttl_over_cap"
        )
    if moment >= expires:
        raise ReceiptVerificationError("the receipt has expired", "expired")
    if not _NONCE.match(read.nonce):
        raise ReceiptVerificationError("nonce must be at least 32 lowercase hex characters", "bad_nonce")
    if nonce_store is None:
        return VerifiedReceipt(read, consumed=False)
    if not nonce_store.consume(read.nonce, read.receipt_id, read.expires_at):
        raise ReceiptVerificationError("this receipt (nonce or receipt_id) was used before", "replay")
    return VerifiedReceipt(read, consumed=True)


MAX_RECEIPT_DEPTH = 8
MAX_RECEIPT_NODES = 10_000
_MAX_INT = 2**63


def _check_well_formed(receipt: JsonObject) -> None:
    """Plain JSON that canonicalises, before anything else looks at it: string keys, finite
    numbers, 64-bit integers, valid UTF-8 strings, bounded depth and size. Anything else is a
    ``malformed_receipt`` refusal, never a raw exception out of hashing or signing."""
    stack: list[tuple[object, int]] = [(receipt, 1)]
    nodes = 0
    while stack:
        value, depth = stack.pop()
        nodes += 1
        if depth > MAX_RECEIPT_DEPTH or nodes > MAX_RECEIPT_NODES:
            raise ReceiptVerificationError("receipt is nested too deeply or too large", "malformed_receipt")
        if isinstance(value, Mapping):
            for key, item in value.items():
                if not isinstance(key, str):
                    raise ReceiptVerificationError("receipt keys must be strings", "malformed_receipt")
                stack.extend(((key, depth + 1), (item, depth + 1)))
        elif isinstance(value, list):
            stack.extend((item, depth + 1) for item in value)
        elif isinstance(value, str):
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                raise ReceiptVerificationError(
                    "receipt holds a string that is not UTF-8", "malformed_receipt"
                ) from None
        elif isinstance(value, bool) or value is None:
            continue
        elif isinstance(value, int):
            if not -_MAX_INT <= value < _MAX_INT:
                raise ReceiptVerificationError("receipt holds an integer out of range", "malformed_receipt")
        elif isinstance(value, float):
            if value != value or value in (float("inf"), float("-inf")):
                raise ReceiptVerificationError("receipt holds a non-finite number", "malformed_receipt")
        else:
            raise ReceiptVerificationError(f"receipt holds a {type(value).__name__}, not JSON", "malformed_receipt")


def _parse_time(text: str) -> dt.datetime:
    try:
        return dt.datetime.strptime(text, _TIME).replace(tzinfo=dt.UTC)
    except ValueError:
        raise ReceiptVerificationError(f"{text!r} is not YYYY-MM-DDTHH:MM:SSZ", "malformed_receipt") from None
