"""``kcp-opa exceptions sign|list|check``: sign waivers; what is waived, for whom, by whom, until when.

``sign`` signs a draft's entries as a registered issuer (kcp_opa.context.issuing) and writes the
file only once it checks as ``check`` would check it.
``list`` shows each exception of a file with its scope, the codes it waives, its grantor,
ticket and expiry, and (given the ledger, a file or a ``postgresql://`` database) how many
decisions applied it (each decision once, however many entries record it). ``check`` exits 1 when
an exception has expired but is still in the file, when one expires within ``--expiring``, or
when the registry does not vouch for one (forged, unsigned, a grantor without a granting role,
longer than the matrix allows): CI runs it so a waiver is removed on purpose, never forgotten.
Both refuse an exception that waives a terminal code or one no rule lets it waive (the policies'
``custom.waivable``: the ``--bundle``'s, else the shipped policies').
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

import click
import yaml

from kcp_opa.audit.summary import AppliedExceptions
from kcp_opa.authoring.policytree import load_modules
from kcp_opa.cli import render
from kcp_opa.cli.ledgerarg import LEDGER
from kcp_opa.cli.options import FILE, FORMAT, MAX_BYTES, keyring_option, now_option, signing_key_option, stacked
from kcp_opa.cli.output import EXIT_INVALID, EXIT_USAGE, as_json, console, fail
from kcp_opa.compile.bundle import read_bundle
from kcp_opa.compile.policyfiles import default_policies
from kcp_opa.compile.resolution import check_waived, waivable_codes
from kcp_opa.context.issuing import issuer_key, signed_exceptions, write_checked
from kcp_opa.core.errors import ActionRejectedError, ValidationFailedError
from kcp_opa.core.jsonread import JsonDict, mapping, strings
from kcp_opa.core.signing import load_keyring
from kcp_opa.decide.gateinput import decision_time
from kcp_opa.declare.diagnostics import Report
from kcp_opa.declare.exceptionfile import (
    ExceptionsFile,
    epoch,
    validate_exceptions,
    verify_exceptions,
)
from kcp_opa.declare.matrix import load_matrix
from kcp_opa.declare.parameters import DEFAULT_MAX_LIFETIME_SECONDS
from kcp_opa.declare.trust import load_trust
from kcp_opa.declare.yamlsource import load_yaml
from kcp_opa.trail.ledger import read_entries

_SPAN = re.compile(r"^(\d+)([smhd])$")
_UNIT = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def _span(text: str | None) -> int:
    if text is None:
        return 0
    found = _SPAN.match(text.strip())
    if found is None:
        raise click.BadParameter(f"{text!r}: a span such as 14d, 12h, 30m or 90s", param_hint="--expiring")
    return int(found.group(1)) * _UNIT[found.group(2)]


def _uses(ledger: Path | None) -> AppliedExceptions:
    """How many recorded decisions applied each exception (their ``exception_applied`` reasons)."""
    applied = AppliedExceptions()
    for _, entry in read_entries(ledger) if ledger is not None else ():
        applied.add(entry)
    return applied


def _waivable(bundle: Path | None) -> tuple[frozenset[str], str]:
    """The codes the policies let an exception waive, and whose policies they are."""
    if bundle is not None:
        return waivable_codes(read_bundle(bundle).modules), str(bundle)
    policies = default_policies()
    return waivable_codes(load_modules([policies])), str(policies)


def _report(
    path: Path, trust: Path | None, keys: Path | None, matrix: Path | None, bundle: Path | None, max_bytes: int
) -> Report[Any]:
    report: Report[Any] = check_waived(validate_exceptions(path, max_bytes=max_bytes), *_waivable(bundle))
    if trust is None:
        return report
    lifetime = DEFAULT_MAX_LIFETIME_SECONDS
    if matrix is not None:
        lifetime = load_matrix(matrix).parameters().max_exception_lifetime_seconds
    keyring = load_keyring(keys) if keys is not None else None
    return verify_exceptions(report, load_trust(trust), keyring, lifetime)


def _rows(held: ExceptionsFile, now: int, soon: int, used: AppliedExceptions) -> list[JsonDict]:
    rows = []
    for item in held.exceptions:
        expires = epoch(item.expires_at)
        state = "expired" if expires <= now else "not_yet_valid" if epoch(item.issued_at) > now else "active"
        if state == "active" and soon and expires <= now + soon:
            state = "expiring"
        rows.append(
            {
                "id": item.id,
                "state": state,
                "scope": dict(item.scope),
                "waives": list(item.waives),
                "grantor": item.grantor,
                "ticket": item.ticket,
                "reason": item.reason,
                "issued_at": item.issued_at,
                "expires_at": item.expires_at,
                "issuer": item.issuer,
                "uses": used.uses(item.id),
            }
        )
    return rows


_COMMON = [
    click.argument("file", type=FILE),
    click.option("--trust", type=FILE, help="The trust registry: verify signatures, issuers and grantors."),
    click.option("--issuer-keys", type=FILE, help="Keyring with HMAC issuers' secrets (Ed25519 keys: registry)."),
    click.option("--matrix", type=FILE, help="The delegation matrix: its maximum exception lifetime (default 30d)."),
    click.option(
        "--bundle", type=FILE, help="Bundle whose policies list the waivable codes [default: the shipped policies]."
    ),
    click.option(
        "--ledger", type=LEDGER, help="Count each exception's uses in this audit ledger (a file or postgresql://)."
    ),
    click.option("--expiring", help="Also flag exceptions that expire within this span (14d, 12h)."),
    click.option("--now", help="The time to judge expiry at (RFC 3339; default: now)."),
    FORMAT,
    MAX_BYTES,
]


_common = stacked(*_COMMON)


def _run(mode: str, file: Path, trust: Path | None, issuer_keys: Path | None, matrix: Path | None,
         bundle: Path | None, ledger: Path | None, expiring: str | None, now: str | None, fmt: str | None,
         max_bytes: int) -> None:  # fmt: skip
    report = _report(file, trust, issuer_keys, matrix, bundle, max_bytes)
    if report.document is None:
        if as_json(fmt):
            render.print_json(report.to_dict())
        else:
            render.reports(console(), [report])
        sys.exit(EXIT_INVALID)
    try:
        moment = decision_time(now)
    except ActionRejectedError as exc:
        fail(f"--now: {exc.reason}", EXIT_USAGE)
    rows = _rows(report.document, int(moment.timestamp()), _span(expiring), _uses(ledger))
    flagged = [r for r in rows if r["state"] in ("expired", "expiring")]
    if as_json(fmt):
        render.print_json({"file": report.file, "verified": trust is not None, "exceptions": rows})
    else:
        out = console()
        for row in rows if mode == "list" else flagged:
            scope = ", ".join(f"{k}={v}" for k, v in sorted(mapping(row["scope"]).items()))
            out.print(
                f"{row['id']} [{row['state']}] waives {', '.join(strings(row['waives']))} for {scope}; granted by "
                f"{row['grantor']} ({row['ticket']}) until {row['expires_at']}; used {row['uses']} times",
                highlight=False,
                markup=False,
            )
        if trust is None:
            out.print("(signatures not verified: give --trust)", highlight=False, markup=False)
        if mode == "check":
            out.print(f"{len(rows)} exceptions: {len(flagged)} expired or expiring", highlight=False, markup=False)
    if mode == "check" and flagged:
        sys.exit(EXIT_INVALID)


@click.group()
def exceptions() -> None:
    """Signed, expiring waivers (kind kcp-opa/exceptions): sign them, list them, check them in CI."""


@exceptions.command(name="list")
@_common
def list_command(**options: Any) -> None:
    """What is waived, for whom, by whom, until when, and how often each exception was used."""
    _run("list", **options)


@exceptions.command(name="check")
@_common
def check_command(**options: Any) -> None:
    """Exit 1 on an exception that expired but is still in the file (or expires within
    --expiring), on one the registry does not vouch for, and on one that waives a terminal code
    or a code the policies (--bundle's, else the shipped ones) do not mark waivable; 0 otherwise."""
    _run("check", **options)


@exceptions.command(name="sign")
@click.argument("draft", type=FILE)
@click.option("--issuer", required=True, help="The registered issuer signing (signs_exceptions: true in the registry).")
@keyring_option("The issuer's keyring file (mode 0600); --kid picks the key [default: its signing kid].")
@click.option("--kid", help="Key id in --keyring [default: the keyring's signing kid].")
@signing_key_option()
@click.option("-o", "--output", type=FILE, required=True, help="Write the signed exceptions file here.")
@click.option("--trust", type=FILE, help="Verify the signed file against this registry (issuer, key, grantor).")
@click.option("--issuer-keys", type=FILE, help="With --trust: keyring with HMAC issuers' secrets.")
@click.option("--matrix", type=FILE, help="The delegation matrix: its maximum exception lifetime (default 30d).")
@click.option(
    "--bundle", type=FILE, help="Bundle whose policies list the waivable codes [default: the shipped policies]."
)
@now_option("Issue time for entries without issued_at [default: now].")
@MAX_BYTES
def sign_command(
    draft: Path,
    issuer: str,
    keyring_path: Path | None,
    kid: str | None,
    signing_key: str | None,
    output: Path,
    trust: Path | None,
    issuer_keys: Path | None,
    matrix: Path | None,
    bundle: Path | None,
    now: str | None,
    max_bytes: int,
) -> None:
    """Sign every exception of DRAFT as ISSUER and write the file the gate verifies (--output).

    \b
    DRAFT is a kind: kcp-opa/exceptions document whose entries hold
      id, scope, waives, reason, ticket, grantor, expires_at   and optionally issued_at
    (default: now); issuer and signature are written here. The signed file is checked as
    `exceptions check` checks it (schema, terminal and unwaivable codes; with --trust the
    registry's issuer, key and grantor, with --matrix the maximum lifetime) before it replaces
    --output: a file the gate would refuse is never written.
    The key never goes in argv: a keyring file only its owner may read (0600), or a pkcs11: URI.
    """
    key = issuer_key(signing_key, keyring_path, kid)
    document = signed_exceptions(load_yaml(draft, max_bytes=max_bytes).data, issuer, key, decision_time(now))

    def refused_unless_valid(written: Path) -> None:
        report = _report(written, trust, issuer_keys, matrix, bundle, max_bytes)
        if report.document is None:
            raise ValidationFailedError(str(output), [str(d).replace(str(written), str(output)) for d in report.errors])

    text = yaml.safe_dump(document, sort_keys=False, allow_unicode=True)
    write_checked(output, text.encode("utf-8"), "--output", refused_unless_valid)
    click.echo(f"{output}: {len(document['exceptions'])} exceptions signed by {issuer} ({key.kid})")
    if trust is None:
        click.echo(
            "kcp-opa: note: not checked against a trust registry (--trust checks the issuer, key and grantor)", err=True
        )
