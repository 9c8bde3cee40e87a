"""A fleet worker's reload request names its bundle as a path or not at all
(kcp_opa/service/worker.py): any other value is refused (``ok: false``), never read as "reload
the configured bundle" and reported as done."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import DEPLOYMENTS, POLICIES

from kcp_opa.compile.compiler import compile_bundle
from kcp_opa.service.config import ServiceConfig
from kcp_opa.service.loading import open_service
from kcp_opa.service.worker import FleetReloader

SUPPORT = DEPLOYMENTS / "support-desk"


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("worker") / "support-desk.tar.gz"
    compile_bundle([SUPPORT / "knowledge.yaml"], SUPPORT / "matrix.yaml", POLICIES, out)
    return out


@pytest.mark.parametrize(
    "named",
    [42, ["/elsewhere.tar.gz"], {"path": "/elsewhere.tar.gz"}, True],
    ids=["a number", "a list", "an object", "a boolean"],
)
def test_a_bundle_that_is_not_a_path_is_refused_not_the_configured_one_reloaded(
    bundle: Path, tmp_path: Path, named: object
) -> None:
    config = ServiceConfig(bundle, store=str(tmp_path / "s.db"), ledger=str(tmp_path / "l.jsonl"))
    reloader = FleetReloader(open_service(config), config)
    before = reloader.service.gate
    answer = reloader.reload_here(None, named)
    assert answer["ok"] is False and "not a path" in str(answer["error"])
    assert reloader.service.gate is before  # nothing was reloaded
    assert reloader.reload_here(None, None)["ok"] is True  # no bundle named: the configured one
    assert reloader.service.gate is not before
