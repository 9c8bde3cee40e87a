"""Attack on the database's credentials: a password put in the store location.

A location carrying a password (``postgresql://gate:SECRET@db/kcp`` on the command line or in
``KCP_OPA_STORE``) would show in ``ps``, shell history, logs and ``/v1/status``. It is refused
in one line that never repeats the password; the password belongs in ``PGPASSWORD`` or a
``PGPASSFILE``, which libpq reads itself. Whatever is shown of a location is redacted.
"""

from __future__ import annotations

import pytest
from conftest import run_cli

from kcp_opa.core.errors import StoreError

pytest.importorskip("psycopg")

SECRET = "s3cr3t-Pa55word-never-shown"
LOCATIONS = [
    f"postgresql://gate:{SECRET}@127.0.0.1:1/kcp",
    f"postgresql://127.0.0.1:1/kcp?password={SECRET}",
    f"postgres://gate:{SECRET}@[::1]:1/kcp",
]


@pytest.mark.parametrize("location", LOCATIONS)
def test_a_password_in_the_location_is_refused_without_being_repeated(location: str) -> None:
    from kcp_opa.stores.opening import open_stores

    with pytest.raises(StoreError) as refused:
        open_stores(location)
    assert refused.value.code == "store_config"
    assert SECRET not in str(refused.value) and "PGPASSWORD" in str(refused.value)


@pytest.mark.parametrize("command", [["store", "migrate", "--store"], ["executions", "list", "--store"]])
def test_the_cli_refuses_it_in_one_line_and_never_echoes_it(command: list[str]) -> None:
    proc = run_cli(*command, LOCATIONS[0])
    assert proc.returncode in {1, 2}
    assert SECRET not in proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_shown_locations_carry_no_password() -> None:
    from kcp_opa.stores.opening import shown

    assert shown(LOCATIONS[0]) == "postgresql://gate@127.0.0.1:1/kcp"
    assert SECRET not in shown(LOCATIONS[1]) and SECRET not in shown(LOCATIONS[2])
    assert shown("audit/service.db") == "audit/service.db"
