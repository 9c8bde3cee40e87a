"""The throwaway PostgreSQL server the store tests run on starts, serves and survives a restart."""

from __future__ import annotations

from typing import Any

import pytest

pytestmark = pytest.mark.postgres


def test_the_server_answers_and_survives_a_restart(postgres: Any) -> None:
    import psycopg

    dsn = postgres.database("kcp_opa_cluster_check")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (v integer)")
        conn.execute("INSERT INTO t VALUES (1)")
    if postgres.port:  # a server this run started: a real restart keeps committed rows
        postgres.restart()
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT v FROM t").fetchone()
    assert row == (1,)
