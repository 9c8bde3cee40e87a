"""The two backends the store contract runs on: a SQLite file and a fresh PostgreSQL database.

``backend`` is parametrized, so every contract test runs the same body on both; the PostgreSQL
parameter carries the ``postgres`` marker (``pytest -m postgres`` selects it) and uses the
session's throwaway server.
"""

from __future__ import annotations

import itertools
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from kcp_opa.stores.opening import Stores, open_stores

_names = itertools.count()


@dataclass
class Backend:
    """Where the stores are, how to open them, and a raw way to tamper with the schema version."""

    name: str
    location: str
    server: Any = None
    opened: list[Stores] = field(default_factory=list)

    def open(self) -> Stores:
        stores = open_stores(self.location)
        self.opened.append(stores)
        return stores

    def set_schema_version(self, component: str, version: int) -> None:
        """Write a schema version behind the store's back (as a newer kcp-opa would have)."""
        if self.name == "sqlite":
            with sqlite3.connect(self.location) as connection:
                connection.execute("UPDATE store_schema SET version = ? WHERE component = ?", (version, component))
            return
        import psycopg

        with psycopg.connect(self.location, autocommit=True) as connection:
            connection.execute("UPDATE store_schema SET version = %s WHERE component = %s", (version, component))

    def close(self) -> None:
        for stores in self.opened:
            database = getattr(stores.executions, "database", None)
            if database is not None:
                database.close()


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    if request.param == "sqlite":
        chosen = Backend("sqlite", str(tmp_path / "stores.db"))
    else:
        server = request.getfixturevalue("postgres")
        chosen = Backend("postgres", server.database(f"kcp_contract_{next(_names)}"), server)
    try:
        yield chosen
    finally:
        chosen.close()
