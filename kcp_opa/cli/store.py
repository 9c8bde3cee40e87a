"""The store group: bring a deployment's stores to this version's schema before its replicas roll out.

Every command that opens a store migrates it on the way (atomically, once across processes);
``store migrate`` does only that, so an operator can migrate a shared database first and see
the versions. A schema newer than this kcp-opa knows is refused (exit 1), never downgraded.
"""

from __future__ import annotations

import click

from kcp_opa.cli import render
from kcp_opa.cli.options import store_option
from kcp_opa.cli.output import EXIT_INVALID, EXIT_UNAVAILABLE, EXIT_USAGE, fail
from kcp_opa.core.errors import StoreError, StoreUnavailableError
from kcp_opa.stores.opening import migrate, shown


@click.group()
def store() -> None:
    """The gate's state: a SQLite file or a postgresql:// database shared by replicas."""


@store.command(name="migrate")
@store_option(
    "SQLite file or postgresql://user@host/db (the password in PGPASSWORD or a PGPASSFILE, never here).", "location"
)
def store_migrate(location: str) -> None:
    """Create or migrate every store at --store; print each store's schema version."""
    try:
        versions = migrate(location)
    except StoreUnavailableError as exc:  # the database cannot be reached: a fault to retry
        fail(f"store_unavailable: {exc}", EXIT_UNAVAILABLE)
        raise
    except StoreError as exc:
        fail(f"{exc} ({exc.code})", EXIT_INVALID if exc.code == "schema_newer" else EXIT_USAGE)
        raise
    render.print_json({"ok": True, "store": shown(location), "versions": versions})
