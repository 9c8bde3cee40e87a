"""``kcp-opa serve tokens add|revoke|list``: the service's tokens file, hashes only.

``add`` makes a random token for a principal, writes only its sha256 to the file and prints the
token once, on stdout (never to a log or argv); ``revoke`` removes a principal's tokens (or one
by its hash); ``list`` shows principals and hash prefixes. A running server picks the file up on
reload (SIGHUP or ``POST /v1/admin/reload``), and a revoked token's UI sessions end with it.

``kcp-opa serve`` stays the server: the group routes any other first argument to it.
"""

from __future__ import annotations

import json
import secrets
from pathlib import Path

import click

from kcp_opa.cli import render
from kcp_opa.cli.options import FORMAT, file_option, trust_option
from kcp_opa.cli.output import EXIT_INVALID, as_json, fail
from kcp_opa.compile.bundle import write_atomically
from kcp_opa.core.principalids import IdentityError, canonical_id

TOKENS_FILE = file_option(
    "--tokens",
    "tokens_path",
    required=True,
    help='The tokens file (JSON {"tokens": {"sha256:<hex>": "principal id"}}) the server reads.',
)


def _read(path: Path, *, missing_ok: bool) -> dict[str, str]:
    if not path.exists() and missing_ok:
        return {}
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        fail(f"{path}: cannot read the tokens file: {exc}", EXIT_INVALID)
        return {}
    tokens = raw.get("tokens") if isinstance(raw, dict) else None
    if not isinstance(tokens, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in tokens.items()):
        fail(f'{path}: expected {{"tokens": {{"sha256:<hex>": "principal id"}}}}', EXIT_INVALID)
        return {}
    return dict(tokens)


def _write(path: Path, tokens: dict[str, str]) -> None:
    body = json.dumps({"tokens": dict(sorted(tokens.items(), key=lambda kv: (kv[1], kv[0])))}, indent=2) + "\n"
    write_atomically(path, body.encode("utf-8"))
    path.chmod(0o600)


def _canonical(principal: str) -> str:
    try:
        return canonical_id(principal)
    except IdentityError as exc:
        fail(f"principal {principal!r}: {exc}", EXIT_INVALID)
        raise  # unreachable: fail exits


@click.group(name="tokens")
def tokens() -> None:
    """The bearer tokens file of `kcp-opa serve --tokens` (hashes only; a token is printed once)."""


@tokens.command(name="add")
@TOKENS_FILE
@click.option("--principal", required=True, help="The registered principal the token authenticates.")
@trust_option("Refuse a principal this registry lacks.")
def tokens_add(tokens_path: Path, principal: str, trust: Path | None) -> None:
    """Make a token for PRINCIPAL: its hash goes to the file, the token to stdout, once."""
    from kcp_opa.declare.trust import load_trust
    from kcp_opa.service.callers import token_hash

    principal_id = _canonical(principal)
    if trust is not None and load_trust(trust).principal(principal_id) is None:
        fail(f"principal {principal_id!r} is not in the trust registry {trust}", EXIT_INVALID)
    held = _read(tokens_path, missing_ok=True)
    token = secrets.token_urlsafe(32)
    held[token_hash(token)] = principal_id
    _write(tokens_path, held)
    click.echo(f"kcp-opa: token for {principal_id} added to {tokens_path}; it is shown once, below", err=True)
    click.echo(token)


@tokens.command(name="revoke")
@TOKENS_FILE
@click.option("--principal", help="Revoke every token of this principal.")
@click.option("--hash", "hashed", help="Revoke one token by its hash (sha256:..., as `list` shows it, or a prefix).")
def tokens_revoke(tokens_path: Path, principal: str | None, hashed: str | None) -> None:
    """Remove tokens from the file (exit 1 when none matched); reload the server to apply."""
    if (principal is None) == (hashed is None):
        raise click.UsageError("give --principal or --hash")
    held = _read(tokens_path, missing_ok=False)
    wanted = _canonical(principal) if principal is not None else None
    kept = {
        h: p
        for h, p in held.items()
        if not (
            (wanted is not None and p == wanted) or (hashed is not None and len(hashed) >= 15 and h.startswith(hashed))
        )
    }
    removed = len(held) - len(kept)
    if removed == 0:
        fail(f"no token in {tokens_path} matches", EXIT_INVALID)
    _write(tokens_path, kept)
    click.echo(f"revoked {removed} token(s); reload the server (SIGHUP or POST /v1/admin/reload) to apply")


@tokens.command(name="list")
@TOKENS_FILE
@FORMAT
def tokens_list(tokens_path: Path, fmt: str | None) -> None:
    """Principals and their tokens' hash prefixes (tokens themselves are never stored)."""
    held = _read(tokens_path, missing_ok=False)
    rows = [{"principal": p, "hash": h[:19] + "…"} for h, p in sorted(held.items(), key=lambda kv: (kv[1], kv[0]))]
    if as_json(fmt):
        render.print_json({"tokens": rows})
        return
    for item in rows:
        click.echo(f"{item['principal']:<32} {item['hash']}")


class ServeGroup(click.Group):
    """`serve tokens ...` manages tokens; `serve [OPTIONS]` is the server, as before."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if not args or args[0] not in self.commands:
            args = ["run", *args]
        return super().parse_args(ctx, args)


def serve_group(run: click.Command) -> click.Group:
    """The `serve` group: the server command (hidden name "run") and `tokens`."""
    group = ServeGroup(name="serve", help=run.help, short_help=run.short_help)
    run.hidden = True
    group.add_command(run, name="run")
    group.add_command(tokens)
    return group
