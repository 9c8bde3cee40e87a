"""An evaluator worker refuses a frame whose bundle parts or input are not objects
(kcp_opa/decide/evalworker.py): read as empty, the bundle would decide with no data and the
action would be evaluated as an empty input. Real frames, real regopy, in this process."""

from __future__ import annotations

import io

import pytest
from conftest import DEPLOYMENTS, POLICIES

from kcp_opa.compile.bundle import LoadedBundle, read_bundle
from kcp_opa.compile.compiler import compile_bundle
from kcp_opa.decide.engine import DECISION_ENTRYPOINT
from kcp_opa.decide.evalworker import FrameError, encode, read_frame, serve

SUPPORT = DEPLOYMENTS / "support-desk"


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> LoadedBundle:
    out = tmp_path_factory.mktemp("frames") / "support-desk.tar.gz"
    compile_bundle([SUPPORT / "knowledge.yaml"], SUPPORT / "matrix.yaml", POLICIES, out)
    return read_bundle(out)


def _start(bundle: LoadedBundle, **changed: object) -> dict[str, object]:
    frame: dict[str, object] = {
        "source": bundle.source,
        "manifest": bundle.manifest,
        "data": bundle.data,
        "modules": bundle.modules,
        "sha256": bundle.sha256,
        "entrypoint": DECISION_ENTRYPOINT,
        "plan_cache": None,
    }
    return frame | changed


def _served(*frames: dict[str, object]) -> tuple[int, list[dict[str, object]]]:
    """What the worker returns and every frame it answers, for ``frames`` then the end of stdin."""
    replies = io.BytesIO()
    code = serve(io.BytesIO(b"".join(encode(frame) for frame in frames)), replies)
    answered, stream = [], io.BytesIO(replies.getvalue())
    while True:
        try:
            answered.append(read_frame(stream))
        except FrameError:
            return code, answered


@pytest.mark.parametrize("part", ["data", "manifest", "modules"])
def test_a_start_frame_whose_bundle_part_is_not_an_object_is_refused(bundle: LoadedBundle, part: str) -> None:
    """Before: ``data: []`` loaded as a bundle with no data and answered ready."""
    code, answered = _served(_start(bundle, **{part: [dict(getattr(bundle, part))]}))
    assert code == 2
    assert answered == [{"error": f"FrameError: the frame's {part} is list, not an object"}]


@pytest.mark.parametrize("value", [["action"], "action", None], ids=["a list", "a string", "missing"])
def test_a_request_whose_input_is_not_an_object_is_an_error_not_an_empty_input(
    bundle: LoadedBundle, value: object
) -> None:
    """Before: the input was evaluated as ``{}`` and its decision answered as a value."""
    request = {} if value is None else {"input": value}
    code, answered = _served(_start(bundle), request, {"input": {"action": {}}})
    assert code == 0 and "ready" in answered[0]
    assert answered[1] == {"error": f"FrameError: the frame's input is {type(value).__name__}, not an object"}
    assert "value" in answered[2]  # the worker goes on with the next input
