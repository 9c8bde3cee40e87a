"""A validation is reused while its caller holds the report, and only for the very same bytes."""

from __future__ import annotations

import gc
import shutil
import weakref
from pathlib import Path

import pytest
from conftest import DEPLOYMENTS, POLICIES

from kcp_opa.compile.compiler import compile_bundle
from kcp_opa.core.errors import ValidationFailedError
from kcp_opa.declare.manifest import validate_manifest
from kcp_opa.declare.matrix import validate_matrix


@pytest.fixture
def deployment(tmp_path: Path) -> Path:
    return Path(shutil.copytree(DEPLOYMENTS / "customer-onboarding", tmp_path / "d"))


def test_validating_the_same_bytes_again_while_the_report_is_held_reuses_it(deployment: Path) -> None:
    report = validate_manifest(deployment / "knowledge.yaml")
    assert report.valid
    assert validate_manifest(deployment / "knowledge.yaml") is report


def test_a_file_edited_after_validate_is_validated_afresh_and_compile_refuses_it(deployment: Path) -> None:
    manifest = deployment / "knowledge.yaml"
    report = validate_manifest(manifest)
    assert report.valid
    manifest.write_text(manifest.read_text(encoding="utf-8").replace("units:", "units: 7\nunitz:", 1), encoding="utf-8")
    again = validate_manifest(manifest)
    assert again is not report and not again.valid
    with pytest.raises(ValidationFailedError):
        compile_bundle([manifest], deployment / "matrix.yaml", POLICIES, deployment / "b.tar.gz")
    assert report.valid  # the held report still describes the bytes it read


def test_the_same_bytes_under_another_name_get_their_own_report(deployment: Path) -> None:
    shutil.copy(deployment / "knowledge.yaml", deployment / "other.yaml")
    first = validate_manifest(deployment / "knowledge.yaml")
    second = validate_manifest(deployment / "other.yaml")
    assert second is not first and second.file.endswith("other.yaml")


def test_a_manifest_and_a_matrix_never_share_a_report(deployment: Path) -> None:
    shutil.copy(deployment / "knowledge.yaml", deployment / "both.yaml")
    manifest = validate_manifest(deployment / "both.yaml")
    matrix = validate_matrix(deployment / "both.yaml")
    assert manifest.valid and not matrix.valid


def test_a_released_report_is_not_kept_alive(deployment: Path) -> None:
    report = validate_manifest(deployment / "knowledge.yaml")
    held = weakref.ref(report)
    del report
    gc.collect()
    assert held() is None


def test_compile_after_validate_gives_the_bundle_a_fresh_compile_gives(deployment: Path) -> None:
    fresh = compile_bundle(
        [deployment / "knowledge.yaml"], deployment / "matrix.yaml", POLICIES, deployment / "a.tar.gz"
    )
    report = validate_manifest(deployment / "knowledge.yaml")
    reused = compile_bundle(
        [deployment / "knowledge.yaml"], deployment / "matrix.yaml", POLICIES, deployment / "b.tar.gz"
    )
    assert report.valid and reused.sha256 == fresh.sha256
