"""The LEDGER argument of the ``audit`` commands: a JSONL file or a ``postgresql://`` database.

A database ledger is dumped, for the life of the command, into a private temporary file that is
byte for byte a ledger file; the command then reads it as it reads any file. Output names the
location as given (:func:`shown_ledger`), without a password (none is accepted in it anyway:
libpq reads ``PGPASSWORD`` or a ``PGPASSFILE``). ``audit dump`` writes that file for an auditor.
"""

from __future__ import annotations

from pathlib import Path

import click

from kcp_opa.cli import render
from kcp_opa.cli.options import output_option
from kcp_opa.cli.output import EXIT_INVALID, fail
from kcp_opa.stores.storedtypes import LedgerSnapshot
from kcp_opa.trail.locations import dump, is_database, readable, shown

_SHOWN = "kcp_opa.ledger_shown"


class LedgerLocation(click.ParamType[Path]):
    """A ledger file path, or a ``postgresql://`` URI read through a temporary dump."""

    name = "LEDGER"

    def convert(self, value: object, param: click.Parameter | None, ctx: click.Context | None) -> Path:
        if isinstance(value, Path):
            return value
        text = str(value)
        if not is_database(text):
            path = Path(text)
            if path.is_dir():
                self.fail(f"{text!r} is a directory, not a ledger file", param, ctx)
            return path
        if ctx is None:  # pragma: no cover - click always passes a context for arguments
            self.fail("a database ledger is read inside a command", param, ctx)
        path = ctx.with_resource(readable(text))
        ctx.meta.setdefault(_SHOWN, {})[str(path)] = shown(text)
        return path


LEDGER = LedgerLocation()


def shown_ledger(path: Path) -> str:
    """How output names the ledger the user gave (a database location, not its temporary dump)."""
    ctx = click.get_current_context(silent=True)
    names: dict[str, str] = ctx.meta.get(_SHOWN, {}) if ctx is not None else {}
    return names.get(str(path), str(path))


def ledger_snapshot(path: Path) -> LedgerSnapshot:
    """The LEDGER argument as the readers take a ledger: named as given, a database's lines by seq."""
    where = shown_ledger(path)
    return LedgerSnapshot(path, where, where, by_seq=where != str(path))


def ledger_line(path: Path, line: int) -> str:
    """Where a problem is: ``FILE:LINE``, or for a database ``LOCATION seq N`` (its dump's line N+1)."""
    where = shown_ledger(path)
    if where == str(path):
        return f"{where}:{line}"
    return f"{where} header" if line <= 1 else f"{where} seq {line - 1}"


@click.command(name="dump")
@click.argument("location", metavar="POSTGRESQL_URI")
@output_option("The JSONL file to write.", required=True)
def audit_dump(location: str, output: Path) -> None:
    """Write a database ledger as a JSONL ledger file, with its checkpoints in OUTPUT.checkpoints.

    The file is byte for byte what a file ledger holds, from one snapshot of the chain: it
    verifies alone (`audit verify OUTPUT --checkpoint OUTPUT.checkpoints --keyring ...`) and
    every other `audit` command reads it. This is what an auditor receives.
    """
    if not is_database(location):
        fail(f"{location}: not a postgresql:// ledger (a ledger file is already its own dump)", EXIT_INVALID)
    if output.exists():
        fail(f"{output}: exists; not overwriting it", EXIT_INVALID)
    entries, checkpoints = dump(location, output)
    document = {"ledger": shown(location), "output": str(output), "entries": entries, "checkpoints": checkpoints}
    render.print_json(document)
