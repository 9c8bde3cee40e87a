"""Attacks on bundles and the plan cache: tar bombs, member floods, duplicate members,
overlapping roots, a module edited under an unchanged .manifest, a plan planted under
another bundle's key. Every one was accepted (or used) by the reader before these checks.
"""

from __future__ import annotations

import gzip
import io
import json
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from conftest import DEPLOYMENTS, POLICIES, REPO, run_cli, vouched_gate

from kcp_opa.authoring.cases import load_cases
from kcp_opa.compile.bundle import read_bundle
from kcp_opa.compile.compiler import compile_bundle
from kcp_opa.core.errors import BundleError

CLEAN_READ = next(
    c for c in load_cases(REPO / "fixtures" / "cases" / "support-desk.yaml") if c.case_id == "sd-read-clean"
)
MANIFEST = json.dumps({"revision": "r1", "roots": ["kcp", "kcp_data"]}).encode()


@pytest.fixture(scope="module")
def bundles(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("adv-bundles")
    for name in ("support-desk", "finance"):
        base = DEPLOYMENTS / name
        compile_bundle([base / "knowledge.yaml"], base / "matrix.yaml", POLICIES, out / f"{name}.tar.gz")
    return out


def _tarball(path: Path, members: list[tuple[str, bytes]]) -> Path:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        for name, content in members:
            info = tarfile.TarInfo(name)
            info.size = len(content)
            tar.addfile(info, io.BytesIO(content))
    path.write_bytes(gzip.compress(raw.getvalue()))
    return path


def _members(bundle: Path) -> list[tuple[str, bytes]]:
    with tarfile.open(bundle, "r:gz") as tar:
        return [(i.name, tar.extractfile(i).read()) for i in tar if i.isfile()]  # type: ignore[union-attr]


class _Zeros(io.RawIOBase):
    def __init__(self, size: int) -> None:
        self.left = size

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: bytearray) -> int:  # type: ignore[override]
        count = min(len(buffer), self.left)
        buffer[:count] = bytes(count)
        self.left -= count
        return count


def test_bundle_tar_bomb_is_refused_before_it_inflates(tmp_path: Path) -> None:
    """Under 3 MiB of gzip that inflates to 600 MiB: over the 512 MiB default cap."""
    size = 600 * 1024 * 1024
    bomb = tmp_path / "bomb.tar.gz"
    with gzip.open(bomb, "wb", compresslevel=1) as gz, tarfile.open(fileobj=gz, mode="w|") as tar:
        info = tarfile.TarInfo(".manifest")
        info.size = len(MANIFEST)
        tar.addfile(info, io.BytesIO(MANIFEST))
        info = tarfile.TarInfo("kcp_data/pad.bin")
        info.size = size
        tar.addfile(info, io.BufferedReader(_Zeros(size), buffer_size=1 << 20))
    assert bomb.stat().st_size < 3 * 1024 * 1024
    with pytest.raises(BundleError, match="inflates to more than"):
        read_bundle(bomb)
    from kcp_opa.compile.bundle import BundleLimits

    with pytest.raises(BundleError, match="inflates to more than 1024 bytes"):
        read_bundle(
            _tarball(tmp_path / "small.tar.gz", [(".manifest", MANIFEST + b" " * 2048)]), limits=BundleLimits(1024)
        )


def test_bundle_member_flood_is_refused(tmp_path: Path) -> None:
    flood = _tarball(
        tmp_path / "flood.tar.gz", [(".manifest", MANIFEST)] + [(f"kcp/m{n}.txt", b"") for n in range(10_001)]
    )
    with pytest.raises(BundleError, match="more than 10000 members"):
        read_bundle(flood)
    proc = run_cli("inspect", str(flood))
    assert proc.returncode == 2 and "members" in proc.stderr


def test_bundle_duplicate_members_are_refused(tmp_path: Path, bundles: Path) -> None:
    members = _members(bundles / "support-desk.tar.gz")
    rego = next((name, content) for name, content in members if name.endswith(".rego"))
    shadow = (rego[0], rego[1] + b"\n# a second copy that a different reader would take\n")
    for variant in ([*members, shadow], [*members, ("./" + rego[0], rego[1])]):
        with pytest.raises(BundleError, match="appears twice"):
            read_bundle(_tarball(tmp_path / "dup.tar.gz", variant))


def test_bundle_overlapping_roots_are_refused(tmp_path: Path) -> None:
    for roots in (["kcp", "kcp/gate"], ["kcp", "kcp"], ["", "kcp"]):
        manifest = json.dumps({"revision": "r1", "roots": roots}).encode()
        with pytest.raises(BundleError, match="overlap"):
            read_bundle(_tarball(tmp_path / "roots.tar.gz", [(".manifest", manifest)]))


def test_bundle_module_edited_under_an_unchanged_manifest_is_refused(tmp_path: Path, bundles: Path) -> None:
    members = _members(bundles / "support-desk.tar.gz")
    rego = next(name for name, _ in members if name.endswith(".rego"))
    edited = [(n, c + b"\n# edited after compile\n" if n == rego else c) for n, c in members]
    with pytest.raises(BundleError, match="does not match its sha256"):
        read_bundle(_tarball(tmp_path / "edited.tar.gz", edited))
    data = next(name for name, _ in members if name.endswith("data.json"))
    changed = [(n, c.replace(b"support", b"xupport", 1) if n == data else c) for n, c in members]
    with pytest.raises(BundleError, match="does not match its sha256"):
        read_bundle(_tarball(tmp_path / "data.tar.gz", changed))
    added = [*members, ("kcp/extra.rego", b"package kcp.extra\nallow := true\n")]
    with pytest.raises(BundleError, match="not recorded"):
        read_bundle(_tarball(tmp_path / "added.tar.gz", added))
    proc = run_cli("inspect", str(tmp_path / "edited.tar.gz"))
    assert proc.returncode == 2 and "sha256" in proc.stderr


def test_bundle_plan_planted_under_another_bundles_key_is_not_used(tmp_path: Path, bundles: Path) -> None:
    cache = tmp_path / "plans"
    fresh = vouched_gate(bundles / "finance.tar.gz").decide(CLEAN_READ.action, now=CLEAN_READ.now)
    vouched_gate(bundles / "finance.tar.gz", plan_cache=cache)
    finance_files = {p.name for p in cache.iterdir()}
    vouched_gate(bundles / "support-desk.tar.gz", plan_cache=cache)
    support_files = {p.name for p in cache.iterdir()} - finance_files
    for name in finance_files:  # plant the support-desk plan (and its binding) under finance's key
        planted = next(s for s in support_files if s.endswith(Path(name).suffix))
        shutil.copyfile(cache / planted, cache / name)
    decision = vouched_gate(bundles / "finance.tar.gz", plan_cache=cache).decide(CLEAN_READ.action, now=CLEAN_READ.now)
    assert decision.decision == fresh.decision and decision.reason_codes == fresh.reason_codes
    assert fresh.decision.value != "ALLOW"  # the support-desk plan would have allowed it


def test_the_preflight_plans_the_bundle_the_gate_holds_not_the_file(tmp_path: Path, bundles: Path) -> None:
    """A bundle file swapped after the gate read it must not pass the preflight for it: the
    child plans the data and modules the parent holds. Re-reading the file, the child would
    plan the harmless bundle put in its place, and the parent would then build the one it holds
    and die of the abort the preflight exists to catch (run in a child, so that is seen)."""
    # A tree with no evaluators: compile builds no decision plan (which would meet the abort in
    # its own child), so the bundle reaches the gate and its preflight.
    policies = tmp_path / "policies"
    (policies / "kcp" / "gate").mkdir(parents=True)
    shutil.copy(POLICIES / "VERSION", policies / "VERSION")
    (policies / "kcp" / "gate" / "decision.rego").write_text(
        "package kcp.gate\n\nimport rego.v1\n\n"
        '_f if "a" in input.xs\n\n_g if _f with input as {"xs": ["a"]}\n\n'
        "# METADATA\n# title: a decision whose plan aborts rego-cpp\n# entrypoint: true\n"
        'decision := {"decision": "ALLOW"} if _g\n'
    )
    crashing = tmp_path / "crashing.tar.gz"
    base = DEPLOYMENTS / "finance"
    compile_bundle([base / "knowledge.yaml"], base / "matrix.yaml", policies, crashing)
    script = (
        "import shutil, sys\n"
        "from kcp_opa.compile.bundle import read_bundle\n"
        "from kcp_opa.core.errors import EngineLoadError\n"
        "from kcp_opa.decide.gate import Gate\n"
        "held = read_bundle(sys.argv[1])\n"
        "shutil.copyfile(sys.argv[2], sys.argv[1])  # the file is swapped for a harmless bundle\n"
        "try:\n"
        "    Gate(held)\n"
        "except EngineLoadError as exc:\n"
        "    print('refused:', exc)\n"
    )
    harmless = bundles / "finance.tar.gz"
    done = subprocess.run(
        [sys.executable, "-c", script, str(crashing), str(harmless)], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, f"the gate's process died (exit {done.returncode}): {done.stderr[-300:]}"
    assert "refused:" in done.stdout and "regopy crashed" in done.stdout, done.stdout
