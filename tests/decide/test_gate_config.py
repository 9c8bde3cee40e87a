"""A gate's settings are one GateConfig, checked when it is built (kcp_opa.decide.gateconfig)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kcp_opa import EngineLoadError, Gate, GateConfig


@pytest.mark.parametrize(
    ("setting", "named"),
    [
        ({"cross_check": "wasm"}, "cross_check='wasm': the engines are opa"),
        ({"isolation": "threads"}, "isolation='threads'"),
    ],
)
def test_an_unknown_engine_or_isolation_is_refused_in_one_line_before_a_bundle_is_read(
    tmp_path: Path, setting: dict[str, str], named: str
) -> None:
    missing = tmp_path / "never-read.tar.gz"  # no bundle: the refusal must name the setting, not the file
    with pytest.raises(EngineLoadError, match=named) as refused:
        Gate.from_bundle(missing, config=GateConfig(**setting))
    assert len(str(refused.value).splitlines()) == 1
