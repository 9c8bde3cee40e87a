"""The options commands share, declared once: path kinds, --format, --max-bytes, --now, keys,
keyrings, trust registries, bundles, checkpoints and decision cases.

Each is a decorator, or a function of the one thing that differs between commands (usually the
help text), so a flag means and reads the same in every command that takes it and one change
reaches them all. Key material never goes in argv: every key option names a file or a URI.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import click

from kcp_opa.core.errors import ActionRejectedError
from kcp_opa.declare.yamlsource import DEFAULT_MAX_BYTES
from kcp_opa.stores.opening import STORE_ENV

Decorator = Callable[[Callable[..., None]], Callable[..., None]]

#: A file (a directory is a usage error), a directory (a file is), either.
FILE = click.Path(path_type=Path, dir_okay=False)
DIR = click.Path(path_type=Path, file_okay=False)
ANY_PATH = click.Path(path_type=Path)


def file_option(*decls: str, **attrs: Any) -> Decorator:
    """An option naming a file."""
    return click.option(*decls, type=FILE, **attrs)


def dir_option(*decls: str, **attrs: Any) -> Decorator:
    """An option naming a directory."""
    return click.option(*decls, type=DIR, **attrs)


def stacked(*decorators: Decorator) -> Decorator:
    """Several options as one decorator, listed (and shown in --help) in the order given."""

    def apply(command: Callable[..., None]) -> Callable[..., None]:
        for decorator in reversed(decorators):
            command = decorator(command)
        return command

    return apply


FORMAT = click.option(
    "--format",
    "fmt",
    type=click.Choice(["text", "json"]),
    default=None,
    help="Output format. Default: text on a terminal, json when piped.",
)
MAX_BYTES = click.option(
    "--max-bytes",
    type=click.IntRange(min=1),
    default=DEFAULT_MAX_BYTES,
    show_default=True,
    help="Refuse YAML files larger than this.",
)
JUNIT = file_option("--junit", help="Also write JUnit XML here.")


def _rfc3339(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """--now is a usage matter: a time that does not parse is exit 2 before anything runs."""
    if value is not None:
        from kcp_opa.decide.gate import decision_time  # only when --now is given: the gate is heavy to import

        try:
            decision_time(value)
        except ActionRejectedError as exc:
            raise click.BadParameter(str(exc).removeprefix("action: ")) from None
    return value


def now_option(help_text: str) -> Decorator:
    """The --now flag every time-dependent command shares, checked at parse time."""
    return click.option("--now", metavar="RFC3339", callback=_rfc3339, help=help_text)


SIGNING_KEY_HELP = (
    "The signing key: a pkcs11: URI (RFC 7512; the key stays in the HSM, the PIN from pin-source or "
    "$KCP_OPA_PKCS11_PIN) or a keyring file (its signing kid)."
)


def signing_key_option(help_text: str = SIGNING_KEY_HELP) -> Decorator:
    """--signing-key URI|KEYRING: a ``pkcs11:`` URI or a keyring file (see ``kcp_opa.cli.keyarg``)."""
    return click.option("--signing-key", "signing_key", metavar="URI|KEYRING", help=help_text)


def ledger_key_option(help_text: str) -> Decorator:
    """--ledger-key URI|KEYRING: the ledger writer's key, which signs every entry and the checkpoints."""
    return click.option("--ledger-key", metavar="URI|KEYRING", help=help_text)


def keyring_option(help_text: str, *, required: bool = False) -> Decorator:
    """--keyring FILE (passed as ``keyring_path``)."""
    return file_option("--keyring", "keyring_path", required=required, help=help_text)


def trust_option(help_text: str | None, *decls: str, required: bool = False) -> Decorator:
    """--trust FILE: a trust registry (``decls`` may name the parameter)."""
    return file_option("--trust", *decls, required=required, help=help_text)


def checkpoints_option(help_text: str) -> Decorator:
    """--checkpoint FILE, repeatable (passed as ``checkpoints``)."""
    return file_option("--checkpoint", "checkpoints", multiple=True, help=help_text)


def bundles_option(help_text: str) -> Decorator:
    """--bundles DIR: where the bundle revisions a ledger names are kept."""
    return dir_option("--bundles", "bundles_dir", default=Path("bundles"), show_default=True, help=help_text)


def bundle_option(help_text: str) -> Decorator:
    """-b/--bundle FILE, required: the bundle a command decides or evaluates with."""
    return file_option("-b", "--bundle", "bundle", required=True, help=help_text)


def action_option(help_text: str | None = None) -> Decorator:
    """--action ACTION.json, required (passed as ``action_path``)."""
    return click.option("--action", "action_path", required=True, metavar="ACTION.json", help=help_text)


def receipt_option(help_text: str | None = None) -> Decorator:
    """--receipt RECEIPT.json, required (passed as ``receipt_path``)."""
    return click.option("--receipt", "receipt_path", required=True, metavar="RECEIPT.json", help=help_text)


def output_option(help_text: str, *, required: bool = False) -> Decorator:
    """-o/--output FILE."""
    return file_option("-o", "--output", required=required, help=help_text)


def cases_options(cases_help: str) -> Decorator:
    """--cases DIR and --deployments DIR: the decision cases a command runs, and their deployments."""
    return stacked(
        dir_option("--cases", "cases_dir", help=cases_help),
        dir_option(
            "--deployments",
            "deployments_dir",
            default=Path("fixtures/deployments"),
            show_default=True,
            help="Where each case's deployment (knowledge.yaml, matrix.yaml) lives.",
        ),
    )


def store_option(help_text: str, dest: str = "store_path") -> Decorator:
    """--store, required, or from $KCP_OPA_STORE: a SQLite file or a postgresql:// database."""
    return click.option("--store", dest, required=True, envvar=STORE_ENV, show_envvar=True, help=help_text)


def choice_option(*decls: str, choices: Sequence[str], default: str, help_text: str) -> Decorator:
    """One of ``choices``, ``default`` when not given (shown in --help)."""
    return click.option(*decls, type=click.Choice(list(choices)), default=default, show_default=True, help=help_text)
