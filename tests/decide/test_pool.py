"""The worker pool decides every input as the in-process engine does (kcp_opa.decide.pool).

Crashes, kills and deadlines are attacked in tests/adversarial/test_engine_crash.py; here: the
same answers for the decision cases and for text the framing must carry byte for byte, and a
closed pool leaves no worker behind.
"""

from __future__ import annotations

import copy
import os
from pathlib import Path

import pytest
from conftest import DEPLOYMENTS, POLICIES, REPO

from kcp_opa.authoring.casecontext import case_input
from kcp_opa.authoring.cases import load_cases
from kcp_opa.compile.bundle import read_bundle
from kcp_opa.compile.compiler import compile_bundle
from kcp_opa.core.errors import EngineLoadError
from kcp_opa.decide.engine import RegopyEngine
from kcp_opa.decide.pool import ProcessEngine, open_engine


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = DEPLOYMENTS / "support-desk"
    out = tmp_path_factory.mktemp("pool") / "support-desk.tar.gz"
    compile_bundle([base / "knowledge.yaml"], base / "matrix.yaml", POLICIES, out)
    return out


def test_the_pool_decides_every_case_as_the_engine_in_this_process(bundle: Path) -> None:
    loaded = read_bundle(bundle)
    inline, pooled = RegopyEngine(loaded, preflight=False), ProcessEngine(loaded, preflight=False, workers=2)
    try:
        cases = load_cases(REPO / "fixtures" / "cases" / "support-desk.yaml")
        documents = [dict(case_input(case, bundle_revision=loaded.revision).document) for case in cases]
        # Text the frames must carry exactly: non-BMP characters, combining marks, controls, quotes.
        odd = copy.deepcopy(documents[0])
        odd["action"]["scenario"] = "tr\u0130ning \U0001f600 e\u0301 \t\"'\\ \u202e"
        for document in [*documents, odd]:
            here, there = inline.evaluate(document), pooled.evaluate(document)
            assert here.error is None and here == there, document["action"].get("action_id")
        assert pooled.lost == 0
    finally:
        pooled.close()


def test_a_closed_pool_leaves_no_worker_behind(bundle: Path) -> None:
    pooled = ProcessEngine(read_bundle(bundle), preflight=False, workers=2)
    pids = pooled.describe()["workers"]
    assert len(pids) == 1  # the others start when evaluations overlap
    pooled.close()
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    assert pooled.evaluate({"action": {}}).error is not None  # closed: refused, never an answer


def test_an_unknown_isolation_is_refused(bundle: Path) -> None:
    with pytest.raises(EngineLoadError, match="isolation='threads'"):
        open_engine(read_bundle(bundle), preflight=False, isolation="threads")
