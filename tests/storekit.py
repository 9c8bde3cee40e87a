"""The two backends the store contract runs on: a SQLite file and a fresh PostgreSQL database.

The ``backend`` fixture (tests/conftest.py) is parametrized over them, so every contract test
runs the same body on both; the PostgreSQL parameter carries the ``postgres`` marker (``pytest
-m postgres`` selects it) and uses the session's throwaway server.
"""

from __future__ import annotations

import itertools
import sqlite3
from dataclasses import dataclass, field
from typing import Any

from kcp_opa.stores.opening import Stores, open_stores

NAMES = itertools.count()


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

    def execute(self, *statements: str) -> None:
        """Run schema statements behind the stores' back (to leave a store as an older kcp-opa did)."""
        if self.name == "sqlite":
            with sqlite3.connect(self.location) as connection:
                for statement in statements:
                    connection.execute(statement)
            return
        import psycopg

        with psycopg.connect(self.location, autocommit=True) as connection:
            for statement in statements:
                connection.execute(statement.encode())

    def close(self) -> None:
        for stores in self.opened:
            database = getattr(stores.executions, "database", None)
            if database is not None:
                database.close()


def raw_rows(store: Any, query: str) -> list[tuple[Any, ...]]:
    """``query``'s rows read on a fresh connection to a SQLite store's file, past the store's API."""
    with sqlite3.connect(store.path) as connection:
        return connection.execute(query).fetchall()
