"""Attack: an ALLOW that owes an obligation reaches a gateway as a bare ``decision: true``.

AuthZEN tells a receiver to ignore fields it does not know, so a gateway that reads only
``decision`` drops ``context.obligations``: on a unit marked ``no-logging`` the gate's ALLOW owes
``redact_content``, and the gateway would let the agent read and log it unredacted. The gate
answers ``true`` only when every obligation is one it keeps itself (``audit``: its ledger entry)
or one the operator declares its gateway enforces (``serve --authzen-obligation``); otherwise
``false`` with the routing state ALLOW and ``unenforced_obligations`` naming what is owed. Real
server processes on a copy of the support-desk deployment whose customer records are
``no-logging``.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from authzenkit import Served, ask, read_customer, serve
from conftest import DEPLOYMENTS

EVALUATION = "/access/v1/evaluation"


def _no_logging(root: Path) -> Path:
    deployments = root / "deployments"
    shutil.copytree(DEPLOYMENTS / "support-desk", deployments / "support-desk")
    manifest = deployments / "support-desk" / "knowledge.yaml"
    fields = "      declared_fields: [customer_id, name, email, plan, tenant_id]"
    text = manifest.read_text()
    assert fields in text
    manifest.write_text(text.replace(fields, "      restrictions: [audit-required, no-logging]\n" + fields, 1))
    return deployments


@pytest.fixture(scope="module")
def gateway_unaware(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    root = tmp_path_factory.mktemp("authzen-no-logging")
    yield from serve(root, deployments=_no_logging(root))


@pytest.fixture(scope="module")
def gateway_redacts(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    root = tmp_path_factory.mktemp("authzen-no-logging-redacts")
    yield from serve(root, deployments=_no_logging(root), extra=("--authzen-obligation", "redact_content"))


def test_an_allow_that_owes_an_obligation_is_not_a_bare_true(gateway_unaware: Served) -> None:
    answer = ask(gateway_unaware.url, EVALUATION, read_customer()).json()
    assert answer["context"]["routing_state"] == "ALLOW"
    assert "redact_content" in answer["context"]["obligations"]
    assert answer["decision"] is False, answer
    assert answer["context"]["unenforced_obligations"] == ["redact_content"]


def test_an_obligation_the_gateway_enforces_is_true(gateway_redacts: Served) -> None:
    answer = ask(gateway_redacts.url, EVALUATION, read_customer()).json()
    assert answer["decision"] is True, answer
    assert answer["context"]["obligations"] == ["audit", "redact_content"]
    assert "unenforced_obligations" not in answer["context"]
