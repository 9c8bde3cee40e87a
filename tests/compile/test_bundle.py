"""Compile: deterministic bytes, atomic output, OPA bundle layout, and the same data document
and lookups in regopy and in the OPA reference engine."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import shutil
import tarfile
from pathlib import Path
from typing import Any

import pytest
from conftest import DEPLOYMENTS, POLICIES, UNDEFINED, opa_query, regopy_query, run_cli
from hypothesis import given, settings
from hypothesis import strategies as st

from kcp_opa.compile.bundle import BundleFile, read_bundle, tarball_bytes
from kcp_opa.compile.compiler import CompileOptions, compile_bundle
from kcp_opa.compile.datadoc import build_index, index_depth, leaf_path, with_residency_places
from kcp_opa.core.errors import BundleError, CompileError, ValidationFailedError
from kcp_opa.declare.effective import UNIT_FIELDS, effective_units
from kcp_opa.declare.manifest import load_manifest
from kcp_opa.declare.matrix import load_matrix

ALL = sorted(p.name for p in DEPLOYMENTS.iterdir() if p.is_dir())


def _compile(name: str, out: Path, **kwargs: Any) -> Any:
    base = DEPLOYMENTS / name
    return compile_bundle(
        [base / "knowledge.yaml"], base / "matrix.yaml", POLICIES, out, options=CompileOptions(**kwargs)
    )


def test_compiling_twice_gives_identical_bytes(tmp_path: Path) -> None:
    first = _compile("customer-onboarding", tmp_path / "a.tar.gz")
    second = _compile("customer-onboarding", tmp_path / "b.tar.gz")
    assert first.sha256 == second.sha256
    assert (tmp_path / "a.tar.gz").read_bytes() == (tmp_path / "b.tar.gz").read_bytes()
    assert first.revision == second.revision


def test_default_bundle_is_named_after_the_project_not_the_folder(tmp_path: Path) -> None:
    # Two deployments in folders both called "prod" must not write the same bundles/prod.tar.gz.
    for name in ("finance", "support-desk"):
        shutil.copytree(DEPLOYMENTS / name, tmp_path / name / "prod")
    shutil.copytree(POLICIES, tmp_path / "policies")
    for name in ("finance", "support-desk"):
        proc = run_cli(
            "compile", f"{name}/prod/knowledge.yaml", "--matrix", f"{name}/prod/matrix.yaml",
            "--format", "json", "--no-engine-check", cwd=tmp_path,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in (tmp_path / "bundles").iterdir()) == ["support-desk.tar.gz", "treasury.tar.gz"]


def test_cli_compile_from_another_directory_gives_the_same_sha256(tmp_path: Path) -> None:
    copy = tmp_path / "elsewhere"
    shutil.copytree(DEPLOYMENTS / "finance", copy / "finance")
    shutil.copytree(POLICIES, copy / "policies")
    args = ["--format", "json", "--no-engine-check"]
    here = run_cli(
        "compile",
        "fixtures/deployments/finance/knowledge.yaml",
        "--matrix",
        "fixtures/deployments/finance/matrix.yaml",
        "-o",
        str(tmp_path / "1.tar.gz"),
        *args,
    )
    there = run_cli(
        "compile",
        "finance/knowledge.yaml",
        "--matrix",
        "finance/matrix.yaml",
        "-o",
        str(tmp_path / "2.tar.gz"),
        *args,
        cwd=copy,
    )
    assert here.returncode == 0, here.stderr
    assert there.returncode == 0, there.stderr
    assert json.loads(here.stdout)["sha256"] == json.loads(there.stdout)["sha256"]
    assert hashlib.sha256((tmp_path / "1.tar.gz").read_bytes()).hexdigest() == json.loads(here.stdout)["sha256"]


def test_revision_changes_with_any_input(tmp_path: Path) -> None:
    base = _compile("support-desk", tmp_path / "a.tar.gz")
    changed = tmp_path / "policies"
    shutil.copytree(POLICIES, changed)
    (changed / "VERSION").write_text("9.9.9\n")
    desk = DEPLOYMENTS / "support-desk"
    other = compile_bundle([desk / "knowledge.yaml"], desk / "matrix.yaml", changed, tmp_path / "b.tar.gz")
    assert other.revision != base.revision
    pinned = _compile("support-desk", tmp_path / "c.tar.gz", revision="release-42")
    assert pinned.revision == "release-42"


def test_tarball_members_are_normalised(tmp_path: Path) -> None:
    result = _compile("finance", tmp_path / "f.tar.gz")
    raw = result.output.read_bytes()
    assert raw[4:8] == b"\x00\x00\x00\x00"  # gzip MTIME
    with gzip.GzipFile(fileobj=io.BytesIO(raw)) as gz:
        assert gz.read(1)
    with tarfile.open(result.output) as tar:
        members = tar.getmembers()
    names = [m.name for m in members]
    assert names == sorted(names)
    assert ".manifest" in names
    assert {"kcp_data/units/data.json", "kcp_data/matrix/data.json", "kcp_data/deployment/data.json"} <= set(names)
    assert "kcp/lib/index.rego" in names
    assert not any(n.endswith("_test.rego") for n in names)
    for member in members:
        assert member.mtime == 0 and member.uid == 0 and member.gid == 0
        assert member.uname == "" and member.gname == "" and member.isfile()


def test_manifest_describes_the_bundle(tmp_path: Path) -> None:
    result = _compile("customer-onboarding", tmp_path / "c.tar.gz")
    bundle = read_bundle(result.output)
    manifest = bundle.manifest
    assert manifest["rego_version"] == 1
    assert manifest["roots"] == ["kcp", "kcp_data"]
    meta = manifest["metadata"]["kcp_opa"]
    assert meta["policy_version"] == (POLICIES / "VERSION").read_text().strip()
    assert meta["manifests"][0]["project"] == "customer-onboarding"
    assert meta["manifests"][0]["version"] == "1.2.0"
    knowledge = DEPLOYMENTS / "customer-onboarding" / "knowledge.yaml"
    assert meta["sources"]["manifests/knowledge.yaml"] == hashlib.sha256(knowledge.read_bytes()).hexdigest()
    index = POLICIES / "kcp" / "lib" / "index.rego"
    assert meta["sources"]["policies/kcp/lib/index.rego"] == hashlib.sha256(index.read_bytes()).hexdigest()
    assert meta["entrypoints"] == ["kcp/controls/verdict", "kcp/gate/decision"]
    assert meta["evaluators"]["field_access_check"] == "1.0.0"
    assert meta["evaluators"]["residency_check"] == "1.1.0"
    # data roots and policy packages are disjoint
    assert all(not p.startswith("kcp_data") for p in meta["packages"])
    assert all(p.startswith("kcp_data/") for p in meta["data_paths"])


def test_evaluators_and_entrypoints_come_from_metadata(tmp_path: Path) -> None:
    policies = tmp_path / "policies"
    (policies / "kcp" / "gate").mkdir(parents=True)
    (policies / "VERSION").write_text("1.0.0\n")
    (policies / "kcp" / "gate" / "fields.rego").write_text(
        "# METADATA\n# title: field access\n# custom:\n#   evaluator_id: field_access_check\n"
        "#   evaluator_version: 1.2.0\npackage kcp.gate\n\nimport rego.v1\n\n"
        '# METADATA\n# entrypoint: true\ndecision := {"decision": "DENY"}\n'
    )
    base = DEPLOYMENTS / "customer-onboarding"
    result = compile_bundle([base / "knowledge.yaml"], base / "matrix.yaml", policies, tmp_path / "x.tar.gz")
    meta = result.manifest["metadata"]["kcp_opa"]
    assert meta["evaluators"] == {"field_access_check": "1.2.0"}
    assert meta["entrypoints"] == ["kcp/gate/decision"]


@pytest.mark.parametrize("name", ALL)
def test_round_trip_same_data_in_regopy_and_opa(tmp_path: Path, name: str) -> None:
    result = _compile(name, tmp_path / f"{name}.tar.gz")
    bundle = read_bundle(result.output)
    with tarfile.open(result.output) as tar:
        files = {m.name: tar.extractfile(m).read() for m in tar.getmembers()}  # type: ignore[union-attr]
    for path, content in files.items():
        if not path.endswith("data.json"):
            continue
        dotted = "data." + path.removesuffix("/data.json").replace("/", ".")
        expected = json.loads(content)
        assert regopy_query(bundle, dotted) == expected, path
        assert opa_query(bundle, dotted) == expected, path


@pytest.mark.parametrize("name", ALL)
def test_every_unit_and_cell_is_found_by_the_rego_index_in_both_engines(tmp_path: Path, name: str) -> None:
    base = DEPLOYMENTS / name
    bundle = read_bundle(_compile(name, tmp_path / "b.tar.gz").output)
    manifest = load_manifest(base / "knowledge.yaml")
    query = (
        "[data.kcp.lib.index.unit(input.project, input.unit),"
        " data.kcp.lib.index.unit_profile(input.project, input.unit)]"
    )
    for unit in effective_units(manifest):
        doc = {"project": unit.project, "unit": unit.unit_id}
        for engine_query in (regopy_query, opa_query):
            entry, profile = engine_query(bundle, query, doc)
            own = {key: entry[key] for key in UNIT_FIELDS}
            assert set(entry) == {"profile", *UNIT_FIELDS}
            # The profile also carries what the compiler derives from it (the residency's places).
            assert {**profile, **own} == with_residency_places(unit.to_policy_data())
    missing = {"project": manifest.project, "unit": "no-such-unit"}
    assert regopy_query(bundle, "data.kcp.lib.index.unit(input.project, input.unit)", missing) is UNDEFINED
    assert opa_query(bundle, "data.kcp.lib.index.unit(input.project, input.unit)", missing) is UNDEFINED
    query = "data.kcp.lib.index.cell(input.t, input.d, input.v)"
    matrix = load_matrix(base / "matrix.yaml")
    cells = list(matrix.cells())
    assert cells
    for cell in cells:
        doc = {"t": cell.task_type, "d": cell.dimension, "v": cell.value}
        assert regopy_query(bundle, query, doc) == cell.level
        assert opa_query(bundle, query, doc) == cell.level
    doc = {"t": "read", "d": "data_categories", "v": "never-agreed"}
    assert regopy_query(bundle, query, doc) is UNDEFINED
    assert opa_query(bundle, query, doc) is UNDEFINED


def test_leaf_path_agrees_with_rego_for_awkward_keys(tmp_path: Path) -> None:
    bundle = read_bundle(_compile("customer-onboarding", tmp_path / "b.tar.gz").output)
    keys = [
        ["p", "u"],
        ["é/ß", "日本"],
        ["a/b", "c"],
        ["", ""],
        ["x" * 300, "y"],
        ["refund", "data_categories", "financial"],
    ]
    for depth in range(5):
        for parts in keys:
            query = "data.kcp.lib.index.leaf_path(input.parts, input.depth)"
            doc = {"parts": parts, "depth": depth}
            expected = list(leaf_path(parts, depth))
            assert regopy_query(bundle, query, doc) == expected
            assert opa_query(bundle, query, doc) == expected


def test_index_depth_and_collisions() -> None:
    assert [index_depth(n) for n in (0, 2, 3, 32, 33, 512, 513)] == [0, 0, 1, 1, 2, 2, 3]
    assert index_depth(100_000) == 4 and index_depth(10**7) == 4
    entries = [((f"p{i % 3}", f"u{i}"), i) for i in range(1000)]
    index = build_index(entries)
    assert index["count"] == 1000 and index["depth"] == 3

    def leaves(node: Any, depth: int) -> list[dict[str, Any]]:
        return [node] if depth == 0 else [leaf for child in node for leaf in leaves(child, depth - 1)]

    all_leaves = leaves(index["slots"], 3)
    assert len(all_leaves) == 16**3
    found = {(p, u): v for leaf in all_leaves for p, units in leaf.items() for u, v in units.items()}
    assert found == {parts: value for parts, value in entries}
    assert max(sum(len(u) for u in leaf.values()) for leaf in all_leaves) <= 8


def test_invalid_input_leaves_no_file(tmp_path: Path) -> None:
    bad = tmp_path / "knowledge.yaml"
    bad.write_text("project: x\nunits: []\n")
    out = tmp_path / "out" / "b.tar.gz"
    with pytest.raises(ValidationFailedError):
        compile_bundle([bad], DEPLOYMENTS / "finance" / "matrix.yaml", POLICIES, out)
    assert not out.exists()


def test_failed_write_leaves_no_partial_and_keeps_the_old_bundle(tmp_path: Path) -> None:
    out = tmp_path / "b.tar.gz"
    _compile("finance", out)
    before = out.read_bytes()
    policies = tmp_path / "policies"
    shutil.copytree(POLICIES, policies)
    (policies / "kcp" / "outside.rego").write_text("package elsewhere\n\nimport rego.v1\n\nx := 1\n")
    base = DEPLOYMENTS / "finance"
    with pytest.raises(CompileError, match="outside the policy root"):
        compile_bundle([base / "knowledge.yaml"], base / "matrix.yaml", policies, out)
    assert out.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b.tar.gz", "policies"]


def test_engine_check_survives_a_policy_that_aborts_regopy(tmp_path: Path) -> None:
    policies = tmp_path / "policies"
    shutil.copytree(POLICIES, policies)
    (policies / "kcp" / "crash.rego").write_text(
        'package kcp.crash\n\nimport rego.v1\n\nf if "a" in input.xs\n\n'
        '# METADATA\n# entrypoint: true\ng if f with input as {"xs": ["a"]}\n'
    )
    base = DEPLOYMENTS / "finance"
    out = tmp_path / "crash.tar.gz"
    proc = run_cli(
        "compile",
        str(base / "knowledge.yaml"),
        "--matrix",
        str(base / "matrix.yaml"),
        "--policies",
        str(policies),
        "-o",
        str(out),
    )
    assert proc.returncode == 2
    assert "regopy crashed" in proc.stderr and "Traceback" not in proc.stderr
    assert not out.exists()


def test_duplicate_project_across_manifests_is_refused(tmp_path: Path) -> None:
    base = DEPLOYMENTS / "finance"
    copy = tmp_path / "copy.yaml"
    shutil.copy(base / "knowledge.yaml", copy)
    with pytest.raises(CompileError, match="declared by both"):
        compile_bundle([base / "knowledge.yaml", copy], base / "matrix.yaml", POLICIES, tmp_path / "b.tar.gz")


def test_several_manifests_compile_into_one_bundle(tmp_path: Path) -> None:
    manifests = [DEPLOYMENTS / n / "knowledge.yaml" for n in ALL]
    result = compile_bundle(manifests, DEPLOYMENTS / "support-desk" / "matrix.yaml", POLICIES, tmp_path / "all.tar.gz")
    bundle = read_bundle(result.output)
    assert result.unit_count == sum(len(load_manifest(m).units) for m in manifests)
    assert set(bundle.data["kcp_data"]["deployment"]["projects"]) == {load_manifest(m).project for m in manifests}


def test_missing_policy_version_is_explained(tmp_path: Path) -> None:
    policies = tmp_path / "policies"
    shutil.copytree(POLICIES, policies)
    (policies / "VERSION").unlink()
    with pytest.raises(CompileError, match="--policy-version"):
        compile_bundle(
            [DEPLOYMENTS / "finance" / "knowledge.yaml"],
            DEPLOYMENTS / "finance" / "matrix.yaml",
            policies,
            tmp_path / "b.tar.gz",
        )


@pytest.mark.parametrize(
    ("files", "fragment"),
    [
        ([BundleFile("kcp/x.rego", b"package kcp.x\n")], "no .manifest"),
        ([BundleFile(".manifest", b"{not json")], "not valid JSON"),
        (
            [BundleFile(".manifest", b'{"roots": ["kcp"]}'), BundleFile("other/data.json", b"{}")],
            "outside the bundle roots",
        ),
        (
            [BundleFile(".manifest", b"{}"), BundleFile("a/data.json", b"{}"), BundleFile("data.json", b'{"a": 1}')],
            "overlaps",
        ),
    ],
)
def test_read_bundle_rejects_malformed_bundles(tmp_path: Path, files: list[BundleFile], fragment: str) -> None:
    path = tmp_path / "bad.tar.gz"
    path.write_bytes(tarball_bytes(files))
    with pytest.raises(BundleError, match=fragment):
        read_bundle(path)


def test_read_bundle_rejects_non_bundles(tmp_path: Path) -> None:
    path = tmp_path / "x.tar.gz"
    path.write_bytes(b"definitely not gzip")
    with pytest.raises(BundleError, match="not a gzipped tar"):
        read_bundle(path)
    with pytest.raises(BundleError, match="cannot read"):
        read_bundle(tmp_path / "missing.tar.gz")
    proc = run_cli("inspect", str(path))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr


_SAFE_TEXT = st.text(alphabet=st.characters(blacklist_categories=("Cc", "Cs"), blacklist_characters='"\\'), max_size=24)


@settings(max_examples=60, deadline=None)
@given(parts=st.lists(_SAFE_TEXT, min_size=1, max_size=3), depth=st.integers(0, 4))
def test_leaf_path_property_both_engines(parts: list[str], depth: int) -> None:
    """For any key the validator accepts, Python, regopy and OPA pick the same leaf."""
    from opa_bindings import OpaEngine
    from regopy import Interpreter

    source = (POLICIES / "kcp" / "lib" / "index.rego").read_text()
    doc = {"parts": parts, "depth": depth}
    interp = Interpreter()
    interp.add_module("index.rego", source)
    interp.set_input_term(json.dumps(doc, ensure_ascii=False))
    output = interp.query("x := data.kcp.lib.index.leaf_path(input.parts, input.depth)")
    on_regopy = output.results[0].bindings["x"]
    with OpaEngine() as engine:
        engine.add_policy("index.rego", source)
        on_opa = engine.eval_query("x := data.kcp.lib.index.leaf_path(input.parts, input.depth)", doc)[0]["x"]
    assert on_regopy == on_opa == list(leaf_path(parts, depth))
