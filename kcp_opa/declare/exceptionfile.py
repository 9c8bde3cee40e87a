"""Exceptions: signed, expiring waivers of findings (``kind: kcp-opa/exceptions``).

Each exception names whom it covers (``scope``: tenant_id, unit, agent_id, task_type; at least
one), the finding codes it waives, a reason, a ticket, its grantor (a registered human whose
role the registry lists in ``exception_grantor_roles``), when it was issued and when it expires
(at most the matrix's ``parameters.exceptions.max_lifetime_seconds`` later), and a signature
by a registered issuer marked ``signs_exceptions`` (the KYA-CJ-1 JSON of the exception without
``signature.value``, as attestations are signed). A terminal finding is never waivable.

Validation (``kcp-opa validate``) names each problem with its line; :func:`load_exceptions`
refuses a file with any error in one line. Whether an exception applies to a decision (its
scope, whether it is current) is the policy's (``kcp.gate.exceptions``), from the verified
entries the gate passes in ``input.context.exceptions``.
"""

from __future__ import annotations

import datetime as dt
import hashlib
from collections.abc import Collection, Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from kcp_opa import schemas
from kcp_opa.core.canonical import canonical_json
from kcp_opa.core.errors import ValidationFailedError
from kcp_opa.core.jsonread import JsonDict, JsonObject, items, objects
from kcp_opa.core.principalids import IdentityError, canonical_id
from kcp_opa.core.signing import ALGORITHMS, Keyring, Signer, document_verifies, sign_document
from kcp_opa.declare.diagnostics import Diagnostic, Findings, Report, Severity, format_path
from kcp_opa.declare.parameters import DEFAULT_MAX_LIFETIME_SECONDS
from kcp_opa.declare.schema_findings import check_schema
from kcp_opa.declare.trust import TrustRegistry
from kcp_opa.declare.validation import DocumentKind, validate_file
from kcp_opa.declare.waivers import TERMINAL_CODES
from kcp_opa.declare.yamlsource import DEFAULT_MAX_BYTES, YamlSource

EXCEPTIONS_KIND_NAME = "kcp-opa/exceptions"
SIGNED_FIELDS = ("id", "scope", "waives", "reason", "ticket", "grantor", "issued_at", "expires_at", "issuer")
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def epoch(text: str) -> int:
    """``YYYY-MM-DDTHH:MM:SSZ`` (the schema's form) as epoch seconds."""
    moment = dt.datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=dt.UTC)
    return int((moment - _EPOCH).total_seconds())


@dataclass(frozen=True)
class GrantedException:
    """One exception as the file holds it (signature included)."""

    id: str
    scope: Mapping[str, str]
    waives: tuple[str, ...]
    reason: str
    ticket: str
    grantor: str
    issued_at: str
    expires_at: str
    issuer: str
    raw: JsonObject

    @classmethod
    def from_dict(cls, raw: JsonObject) -> GrantedException:
        """The exception ``raw`` holds; its ``scope`` must be an object (read as empty, it would
        cover every action), else :class:`ValidationFailedError`."""
        scope = raw["scope"]
        if not isinstance(scope, Mapping):
            why = f"exception {raw.get('id')!r}: scope is {type(scope).__name__}, not an object"
            raise ValidationFailedError(str(raw.get("id")), [why])
        return cls(
            str(raw["id"]),
            {str(k): str(v) for k, v in scope.items()},
            tuple(str(c) for c in items(raw["waives"])),
            str(raw["reason"]),
            str(raw["ticket"]),
            str(raw["grantor"]),
            str(raw["issued_at"]),
            str(raw["expires_at"]),
            str(raw["issuer"]),
            raw,
        )

    def to_dict(self) -> JsonDict:
        return dict(self.raw)

    def to_input(self) -> JsonDict:
        """What the policy reads (``input.context.exceptions[*]``): times as epoch seconds too,
        the agent scope canonical (compared with the gate's principal)."""
        scope = dict(self.scope)
        if "agent_id" in scope:
            scope["agent_id"] = canonical_id(scope["agent_id"])
        return {
            "id": self.id,
            "scope": scope,
            "waives": list(self.waives),
            "reason": self.reason,
            "ticket": self.ticket,
            "grantor": canonical_id(self.grantor),
            "issuer": canonical_id(self.issuer),
            "issued_at": self.issued_at,
            "expires_at": self.expires_at,
            "not_before_epoch_seconds": epoch(self.issued_at),
            "expires_epoch_seconds": epoch(self.expires_at),
        }


@dataclass(frozen=True)
class ExceptionsFile:
    file: str
    sha256: str
    name: str
    exceptions: tuple[GrantedException, ...]
    #: The line each exception starts on, for findings about it after validation.
    lines: tuple[int | None, ...] = ()


def sign_exception(fields: JsonObject, issuer: str, key: Signer) -> JsonDict:
    """Sign one exception as ``issuer`` (whose registry entry is marked ``signs_exceptions``)."""
    item = {k: fields[k] for k in SIGNED_FIELDS if k in fields and k != "issuer"}
    item["issuer"] = issuer
    return sign_document(item, key)


def _check(doc: JsonObject, findings: Findings) -> None:
    entries = doc.get("exceptions")
    if not isinstance(entries, list):
        return
    seen: dict[str, int] = {}
    for index, entry in enumerate(entries):
        if not isinstance(entry, dict):
            continue
        here = ("exceptions", index)
        ident = entry.get("id")
        if isinstance(ident, str):
            if ident in seen:
                findings.error("duplicate_id", f"exception {ident!r} is also entry {seen[ident]}", (*here, "id"))
            seen.setdefault(ident, index)
        for code in items(entry.get("waives")):
            if code in TERMINAL_CODES:
                findings.error(
                    "terminal_not_waivable",
                    f"{code} is a terminal denial and can never be waived",
                    (*here, "waives"),
                )
        issued, expires = entry.get("issued_at"), entry.get("expires_at")
        if isinstance(issued, str) and isinstance(expires, str):
            try:
                if epoch(expires) <= epoch(issued):
                    findings.error("invalid_validity", "expires_at is not after issued_at", (*here, "expires_at"))
            except ValueError:
                findings.error("bad_time", "issued_at/expires_at is not a UTC time", (*here, "expires_at"))


def _counts(data: JsonObject) -> dict[str, int]:
    entries = data.get("exceptions")
    return {"exception_count": len(entries) if isinstance(entries, list) else 0}


def _build(source: YamlSource) -> ExceptionsFile:
    data = source.data
    granted = tuple(GrantedException.from_dict(e) for e in objects(data["exceptions"]))
    lines = tuple(source.line_of(("exceptions", i)) for i in range(len(granted)))
    return ExceptionsFile(source.file, source.sha256, str(data["name"]), granted, lines)


EXCEPTIONS_KIND: DocumentKind[ExceptionsFile] = DocumentKind(
    noun="exceptions file",
    schema=schemas.EXCEPTIONS,
    check=_check,
    counts=_counts,
    build=_build,
)


def refusal(raw: JsonObject, registry: TrustRegistry, keyring: Keyring | None, max_lifetime_seconds: int) -> str | None:
    """Why the registry does not vouch for the exception ``raw``, or None when it does."""
    try:
        issuer = registry.issuer(str(raw.get("issuer")))
        grantor = registry.principal(str(raw.get("grantor")))
    except IdentityError as exc:
        return f"not a canonical identity: {exc}"
    if issuer is None:
        return f"issuer {raw.get('issuer')!r} is not in the trust registry"
    if not issuer.signs_exceptions:
        return f"issuer {issuer.id} may not sign exceptions (signs_exceptions)"
    signature = raw.get("signature")
    if not isinstance(signature, Mapping) or not isinstance(signature.get("value"), str):
        return "unsigned"
    alg, kid = signature.get("alg"), signature.get("kid")
    key = issuer.key(kid, keyring) if isinstance(kid, str) and alg in ALGORITHMS else None
    if key is None or key.alg != alg or not document_verifies(raw, key):
        return f"the signature does not verify with {issuer.id}'s key {kid!r}"
    if grantor is None:
        return f"grantor {raw.get('grantor')!r} is not a registered principal"
    if grantor.type != "human" or not set(grantor.roles) & registry.exception_grantor_roles:
        return f"grantor {grantor.id} has no role the registry allows to grant exceptions"
    lifetime = epoch(str(raw["expires_at"])) - epoch(str(raw["issued_at"]))
    if lifetime > max_lifetime_seconds:
        return f"it runs {lifetime} s, longer than the matrix's maximum of {max_lifetime_seconds} s"
    return None


def verify_exceptions(
    report: Report[ExceptionsFile],
    registry: TrustRegistry,
    keyring: Keyring | None = None,
    max_lifetime_seconds: int = DEFAULT_MAX_LIFETIME_SECONDS,
) -> Report[ExceptionsFile]:
    """``report`` with an error (and its line) for each exception the registry does not vouch for."""
    document = report.document
    if document is None:
        return report
    found = []
    for index, item in enumerate(document.exceptions):
        why = refusal(item.raw, registry, keyring, max_lifetime_seconds)
        if why is not None:
            line = document.lines[index] if index < len(document.lines) else None
            found.append(
                Diagnostic(
                    Severity.ERROR,
                    "exception_refused",
                    f"exception {item.id}: {why}",
                    ("exceptions", index),
                    file=report.file,
                    line=line,
                )
            )
    if not found:
        return report
    return replace(report, diagnostics=(*report.diagnostics, *found), document=None)


def unknown_task_types(
    report: Report[ExceptionsFile], task_types: Collection[str], matrices: str
) -> Report[ExceptionsFile]:
    """``report`` with an error for each exception scoped to a task type no matrix declares.

    Such a grant matches no action today, so the one meant stays denied; and it would start to
    match the day someone adds that task type, without anyone signing for it again.
    """
    document = report.document
    if document is None:
        return report
    found = [
        Diagnostic(
            Severity.ERROR,
            "exception_task_type_unknown",
            f"exception {item.id}: scope.task_type {item.scope['task_type']!r} is no task type of {matrices}; "
            "it would waive nothing today and match whatever task type takes that name later",
            ("exceptions", index, "scope", "task_type"),
            file=report.file,
            line=document.lines[index] if index < len(document.lines) else None,
        )
        for index, item in enumerate(document.exceptions)
        if "task_type" in item.scope and item.scope["task_type"] not in task_types
    ]
    return replace(report, diagnostics=(*report.diagnostics, *found)) if found else report


def validate_exceptions(path: str | Path, *, max_bytes: int = DEFAULT_MAX_BYTES) -> Report[ExceptionsFile]:
    return validate_file(EXCEPTIONS_KIND, path, max_bytes)


def load_exceptions(
    path: str | Path,
    registry: TrustRegistry,
    *,
    keyring: Keyring | None = None,
    max_lifetime_seconds: int = DEFAULT_MAX_LIFETIME_SECONDS,
    max_bytes: int = DEFAULT_MAX_BYTES,
) -> ExceptionsFile:
    """The verified file, or :class:`ValidationFailedError` naming every refused entry."""
    report = verify_exceptions(validate_exceptions(path, max_bytes=max_bytes), registry, keyring, max_lifetime_seconds)
    if report.document is None:
        raise ValidationFailedError(report.file, [str(d) for d in report.errors])
    return report.document


def exceptions_from_data(
    data: JsonObject,
    registry: TrustRegistry,
    *,
    keyring: Keyring | None = None,
    max_lifetime_seconds: int = DEFAULT_MAX_LIFETIME_SECONDS,
    file: str = "(in memory)",
) -> ExceptionsFile:
    """Like :func:`load_exceptions` for a document already in memory (no lines to name)."""
    findings = Findings()
    check_schema(
        schemas.validator(schemas.EXCEPTIONS), dict(data), findings, schemas.fast_validator(schemas.EXCEPTIONS)
    )
    if not findings.errors:
        _check(dict(data), findings)
    findings.close()
    errors = [f"{file}: {format_path(d.path)}: {d.message} [{d.code}]" for d in findings.errors]
    if not errors:
        for index, raw in enumerate(objects(data["exceptions"])):
            why = refusal(raw, registry, keyring, max_lifetime_seconds)
            if why is not None:
                errors.append(f"{file}: exceptions[{index}]: exception {raw['id']}: {why} [exception_refused]")
    if errors:
        raise ValidationFailedError(file, errors)
    granted = tuple(GrantedException.from_dict(e) for e in objects(data["exceptions"]))
    digest = hashlib.sha256(canonical_json(dict(data))).hexdigest()
    return ExceptionsFile(file, digest, str(data["name"]), granted)


__all__ = [
    "EXCEPTIONS_KIND",
    "EXCEPTIONS_KIND_NAME",
    "ExceptionsFile",
    "GrantedException",
    "exceptions_from_data",
    "load_exceptions",
    "sign_exception",
    "validate_exceptions",
    "verify_exceptions",
]
