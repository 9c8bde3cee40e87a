"""The issuer's side of the context stage: fact attestations and waivers signed without Python.

``kcp-opa facts sign`` and ``kcp-opa exceptions sign`` make here what the gate verifies: a fact
attestation exactly as :func:`kcp_opa.context.sign_fact` makes it (bound to one action's hash or
to one subject, with an expiry), and an exceptions file whose entries are signed as
:func:`kcp_opa.declare.exceptionfile.sign_exception` signs them. What the gate would refuse is
refused here first, in one line naming what to fix: a fact the gate does not take from
attestations, a value it may not have, an expiry not after issue, and (given the registry) an
issuer the registry does not list for the fact or a key it does not hold for that issuer. The
key comes from a ``pkcs11:`` URI or from a keyring file only its owner can read (0600).
"""

from __future__ import annotations

import datetime as dt
import fcntl
import json
import os
import re
import stat
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from kcp_opa.context.attested import SignedAttestations, sign_fact
from kcp_opa.context.facts import ATTESTED_VALUES
from kcp_opa.context.metering import METERED_SPEND, sign_spend
from kcp_opa.context.metering import refusal as spend_refusal
from kcp_opa.core import strictjson
from kcp_opa.core.errors import CodedError
from kcp_opa.core.files import read_regular, replace_atomically
from kcp_opa.core.jsonread import JsonDict, JsonObject
from kcp_opa.core.principalids import IdentityError, canonical_id
from kcp_opa.core.signing import PKCS11_SCHEME, Key, Keyring, Signer, load_keyring, load_signing_key
from kcp_opa.declare.exceptionfile import EXCEPTIONS_KIND_NAME, SIGNED_FIELDS, sign_exception
from kcp_opa.declare.trust import TrustRegistry

STAMP = "%Y-%m-%dT%H:%M:%SZ"
_HASH = re.compile(r"^sha256:[0-9a-f]{64}$")
_SPAN = re.compile(r"^(\d+)([smhd])$")
_UNIT = {"s": 1, "m": 60, "h": 3600, "d": 86400}
#: What each refusal of :meth:`SignedAttestations.refusal` means for the one signing.
_REFUSALS = {
    "unknown_issuer": "issuer {issuer} is not in the trust registry {registry} (its issuers[*].id)",
    "issuer_not_allowed": "the trust registry {registry} does not list {fact} in issuer {issuer}'s facts",
    "bad_signature": "key {kid} is not a key of issuer {issuer} in the trust registry {registry}",
}
#: An exception's fields the signer writes (the rest come from the draft).
_FILLED = ("issuer", "signature")


class IssuingError(CodedError):
    """Something the gate would refuse, caught before it is signed (one line, naming what to fix)."""

    code = "issuing"


def span_seconds(text: str, option: str) -> int:
    """``90s``, ``30m``, ``12h`` or ``14d`` as seconds (more than zero)."""
    found = _SPAN.match(text.strip())
    if found is None or int(found.group(1)) == 0:
        raise IssuingError(f"{option} {text!r}: a span such as 1h, 30m, 14d or 90s", "usage")
    return int(found.group(1)) * _UNIT[found.group(2)]


def owner_only_keyring(path: str | Path, option: str) -> Keyring:
    """The keyring file at ``path``, refused when anyone but its owner may read it (a private key
    readable by the group or others is a leaked key: fix its mode before it signs anything)."""
    try:
        mode = stat.S_IMODE(Path(path).stat().st_mode)
    except OSError as exc:
        raise IssuingError(f"{option} {path}: cannot read it: {exc.strerror or exc}", "no_keyring") from None
    if mode & 0o077:
        raise IssuingError(
            f"{option} {path} may be read by others (mode {mode:04o}): run `chmod 600 {path}` (it holds a private key)",
            "key_file_mode",
        )
    return load_keyring(path)


def issuer_key(signing_key: str | None, keyring_path: Path | None, kid: str | None) -> Key:
    """The issuer's key: a ``pkcs11:`` URI or a keyring file (``kid``, else its signing kid)."""
    if (signing_key is None) == (keyring_path is None):
        raise IssuingError("give the issuer's key: --signing-key URI|KEYRING or --keyring FILE (one of them)", "usage")
    if signing_key is not None and signing_key.startswith(PKCS11_SCHEME):
        if kid is not None:
            raise IssuingError("--kid picks a key of a keyring file; a pkcs11: URI names its key itself", "usage")
        return load_signing_key(signing_key)
    option = "--signing-key" if signing_key is not None else "--keyring"
    ring = owner_only_keyring(signing_key or str(keyring_path), option)
    if kid is None:
        return ring.signer()
    key = ring.keys.get(kid)
    if key is None:
        raise IssuingError(
            f"--kid {kid} is not in {signing_key or keyring_path} (its kids: {', '.join(sorted(ring.keys))})"
        )
    if key.retired or not key.can_sign:
        raise IssuingError(f"--kid {kid} is retired or holds no private key: it cannot sign", "cannot_sign")
    return key


def attested_value(fact: str, text: str) -> object:
    """The value ``text`` states for the attested fact ``fact`` (booleans as ``true``/``false``)."""
    allowed = ATTESTED_VALUES.get(fact)
    if allowed is None:
        raise IssuingError(f"--fact {fact!r} is not an attested fact: one of {', '.join(sorted(ATTESTED_VALUES))}")
    if all(isinstance(v, bool) for v in allowed):
        if text in ("true", "false"):
            return text == "true"
        raise IssuingError(f"--value {text!r}: {fact} is true or false")
    if text in allowed:
        return text
    raise IssuingError(f"--value {text!r}: {fact} is one of {', '.join(sorted(str(v) for v in allowed))}")


def moment(text: str, option: str) -> dt.datetime:
    """An RFC 3339 time with its zone, as an aware UTC datetime at whole seconds."""
    try:
        parsed = dt.datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        parsed = None
    if parsed is None or parsed.tzinfo is None:
        raise IssuingError(f"{option} {text!r}: an RFC 3339 time with its zone (e.g. 2026-11-29T11:00:00Z)", "usage")
    return parsed.astimezone(dt.UTC).replace(microsecond=0)


def validity(issued: dt.datetime, expires_at: str | None, expires_in: str | None) -> tuple[str, str]:
    """``(issued_at, expires_at)`` as the gate reads them; exactly one expiry, after the issue time."""
    if (expires_at is None) == (expires_in is None):
        raise IssuingError("give the expiry: --expires-at RFC3339 or --expires-in SPAN (one of them)", "usage")
    if expires_at is not None:
        until = moment(expires_at, "--expires-at")
    else:
        until = issued + dt.timedelta(seconds=span_seconds(str(expires_in), "--expires-in"))
    if until <= issued:
        raise IssuingError(f"--expires-at {until.strftime(STAMP)} is not after the issue time {issued.strftime(STAMP)}")
    return issued.strftime(STAMP), until.strftime(STAMP)


def binding(action_hash: str | None, subject_id: str | None, tenant_id: str | None = None) -> dict[str, str]:
    """What the fact is bound to: one action's hash or one subject (within ``tenant_id``, if
    given), never both, never neither."""
    if (action_hash is None) == (subject_id is None):
        raise IssuingError(
            "bind the fact to one action (--action or --action-hash) or one subject (--subject)", "usage"
        )
    if action_hash is not None and tenant_id is not None:
        raise IssuingError("--tenant binds a subject's fact; an action's hash already names its tenant", "usage")
    if action_hash is not None:
        if not _HASH.match(action_hash):
            raise IssuingError(f"--action-hash {action_hash!r}: an action hash is sha256:<64 lowercase hex>")
        return {"action_hash": action_hash}
    bound = {"subject_id": str(subject_id)}
    if tenant_id is not None:
        bound["tenant_id"] = tenant_id
    for flag, value in (("--subject", subject_id), ("--tenant", tenant_id)):
        if value is None:
            continue
        try:
            canonical_id(value)
        except IdentityError as exc:
            raise IssuingError(f"{flag} {value!r}: {exc}") from None
    return bound


def sign_fact_attestation(
    fact: str,
    value_text: str,
    issuer: str,
    key: Signer,
    *,
    bound: Mapping[str, str],
    times: tuple[str, str],
    registry: TrustRegistry | None = None,
    keyring: Keyring | None = None,
) -> JsonDict:
    """One signed attestation; with ``registry``, refused unless the gate would accept it."""
    fields = {"fact": fact, "value": attested_value(fact, value_text), **bound}
    signed = sign_fact({**fields, "issued_at": times[0], "expires_at": times[1]}, issuer, key)
    if registry is not None:
        # The subject and tenant it names, as an action of theirs would: the gate's binding check.
        action = {name: bound[name] for name in ("subject_id", "tenant_id") if name in bound}
        why = SignedAttestations(registry, keyring).refusal(signed, action, bound.get("action_hash", ""))
        if why is not None:
            text = _REFUSALS.get(why, "the gate would refuse it: {why}")
            raise IssuingError(text.format(issuer=issuer, registry=registry.name, fact=fact, kid=key.kid, why=why), why)
    return signed


def sign_spend_attestation(
    fields: JsonObject,
    issuer: str,
    key: Signer,
    *,
    period: tuple[dt.datetime, dt.datetime],
    times: tuple[str, str],
    registry: TrustRegistry | None = None,
    keyring: Keyring | None = None,
) -> JsonDict:
    """One signed spend attestation (``fields``: budget, subject, amount_minor, currency) for the
    period ``(start, end)``; with ``registry``, refused unless the gate would count it."""
    if period[1] < period[0]:
        raise IssuingError(
            f"--period-end {period[1].strftime(STAMP)} is before --period-start {period[0].strftime(STAMP)}", "usage"
        )
    item = {**fields, "period_start": period[0].strftime(STAMP), "period_end": period[1].strftime(STAMP)}
    signed = sign_spend({**item, "issued_at": times[0], "expires_at": times[1]}, issuer, key)
    if registry is not None:
        why = spend_refusal(signed, registry, keyring)
        if why is not None:
            text = _REFUSALS.get(why, "the gate would refuse it: {why}")
            raise IssuingError(
                text.format(issuer=issuer, registry=registry.name, fact=METERED_SPEND, kid=key.kid, why=why), why
            )
    return signed


def add_attestation(path: Path, item: JsonObject) -> int:
    """Add ``item`` to the JSON list at ``path`` (the file the gate's ``--attestations`` reads),
    creating it; all or nothing. Issuers signing at once take turns (a lock on the directory, as
    the file itself is replaced), so none loses another's. Returns how many the file holds."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        directory = os.open(path.parent, os.O_RDONLY)
    except OSError as exc:
        raise IssuingError(f"--output {path}: cannot write it: {exc.strerror or exc}") from None
    try:
        fcntl.flock(directory, fcntl.LOCK_EX)
        return _added(path, item)
    finally:
        os.close(directory)  # closing releases the lock


def _added(path: Path, item: JsonObject) -> int:
    held: object = []
    if path.exists():
        try:
            held = strictjson.loads(read_regular(path))
        except (OSError, ValueError) as exc:
            raise IssuingError(f"--output {path}: not a readable JSON list of attestations: {exc}") from None
    if not isinstance(held, list):
        raise IssuingError(f"--output {path}: holds JSON that is not a list of attestations: give another file")
    held.append(dict(item))
    write_checked(path, json.dumps(held, indent=2).encode("utf-8") + b"\n", "--output")
    return len(held)


def write_checked(path: Path, content: bytes, option: str, check: Callable[[Path], None] | None = None) -> None:
    """Write ``content`` beside ``path``, ``check`` it there, then rename: a file that fails the
    check (or a write cut short) never replaces what ``path`` holds."""
    try:
        replace_atomically(path, content, check)
    except OSError as exc:
        raise IssuingError(f"{option} {path}: cannot write it: {exc.strerror or exc}") from None


def signed_exceptions(draft: object, issuer: str, key: Signer, now: dt.datetime) -> dict[str, Any]:
    """The draft ``kcp-opa/exceptions`` document with every entry signed by ``issuer``.

    An entry lists ``id, scope, waives, reason, ticket, grantor, expires_at`` and optionally
    ``issued_at`` (default: ``now``); ``issuer`` and ``signature`` are written here (any given are
    replaced). The schema, the matrix and the registry then judge the signed file."""
    if not isinstance(draft, Mapping) or draft.get("kind") != EXCEPTIONS_KIND_NAME:
        raise IssuingError(f"the draft is a kind: {EXCEPTIONS_KIND_NAME} document (docs/exceptions.md)")
    entries = draft.get("exceptions")
    if not isinstance(entries, list) or not entries:
        raise IssuingError("the draft's exceptions: a list of at least one exception")
    signed = []
    for index, entry in enumerate(entries):
        if not isinstance(entry, Mapping):
            raise IssuingError(f"exceptions[{index}] is not a mapping of the fields {', '.join(SIGNED_FIELDS[:-1])}")
        fields = {k: v for k, v in entry.items() if k not in _FILLED}
        unknown = sorted(set(fields) - set(SIGNED_FIELDS))
        if unknown:
            raise IssuingError(
                f"exceptions[{index}]: unknown field {unknown[0]!r} (the fields: {', '.join(SIGNED_FIELDS)})"
            )
        fields.setdefault("issued_at", now.strftime(STAMP))
        missing = [f for f in SIGNED_FIELDS if f not in fields and f != "issuer"]
        if missing:
            raise IssuingError(f"exceptions[{index}] ({fields.get('id', 'no id')}): missing {', '.join(missing)}")
        signed.append(sign_exception(fields, issuer, key))
    return {**{k: v for k, v in draft.items() if k != "exceptions"}, "exceptions": signed}
