"""Attack class: a bad day (issue 26, class 8). A FIFO where a file should be, a clock at the
end of time, a tar whose member header announces 1 GiB, a transfer with the tenant left out.
Real processes, real files, both engines."""

from __future__ import annotations

import copy
import gzip
import io
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

import pytest
from conftest import DEPLOYMENTS, POLICIES, REPO, opa_query, regopy_query, vouched_gate

from kcp_opa.compile.bundle import read_bundle
from kcp_opa.compile.compiler import compile_bundle

KYA = json.loads((REPO / "fixtures" / "kya-supplier-payment-action.json").read_text())
FINANCE = DEPLOYMENTS / "finance"


def _cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """``kcp-opa ARGS`` with a deadline: a process that hangs on a FIFO fails the test, never the run."""
    env = {k: v for k, v in os.environ.items() if k != "KCP_OPA_DEBUG"}
    try:
        return subprocess.run(
            [sys.executable, "-m", "kcp_opa", *args],
            cwd=REPO,
            capture_output=True,
            text=True,
            env=env,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"kcp-opa {' '.join(args)} hung (still waiting after {timeout} s)")


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("badday") / "finance.tar.gz"
    compile_bundle([FINANCE / "knowledge.yaml"], FINANCE / "matrix.yaml", POLICIES, out)
    return out


@pytest.fixture
def fifo(tmp_path: Path) -> Path:
    path = tmp_path / "pipe.json"
    os.mkfifo(path)  # nobody ever writes: opening it for reading blocks forever
    return path


def _one_line_refusal(proc: subprocess.CompletedProcess[str], fifo: Path) -> None:
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "FIFO" in lines[0] and str(fifo) in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_fifo_as_action_bundle_manifest_or_registry_is_refused_not_waited_on(bundle: Path, fifo: Path) -> None:
    _one_line_refusal(_cli("decide", "-b", str(bundle), "-i", str(fifo)), fifo)
    action = str(REPO / "fixtures" / "kya-supplier-payment-action.json")
    _one_line_refusal(_cli("decide", "-b", str(fifo), "-i", action), fifo)
    _one_line_refusal(_cli("validate", str(fifo)), fifo)
    matrix = str(FINANCE / "matrix.yaml")
    _one_line_refusal(_cli("compile", str(fifo), "--matrix", matrix, "-o", str(fifo.with_suffix(".tgz"))), fifo)
    manifest = str(FINANCE / "knowledge.yaml")
    registry = _cli("compile", manifest, "--matrix", matrix, "--trust", str(fifo), "-o", str(fifo.with_suffix(".t")))
    _one_line_refusal(registry, fifo)


def test_a_decision_time_past_the_last_year_is_a_one_line_usage_error(bundle: Path) -> None:
    action = str(REPO / "fixtures" / "kya-supplier-payment-action.json")
    for moment in ("9999-12-31T23:59:59-14:00", "0001-01-01T00:00:00+14:00", "1969-12-31T23:59:59Z"):
        proc = _cli("decide", "-b", str(bundle), "-i", action, "--now", moment)
        assert proc.returncode in (1, 2), (moment, proc.returncode, proc.stderr)  # never 3 (internal error)
        assert "Traceback" not in proc.stderr and "outside" in proc.stderr, proc.stderr
    ok = _cli("decide", "-b", str(bundle), "-i", action, "--now", "2026-07-17T08:00:00Z", "--format", "json")
    assert ok.returncode == 0, ok.stderr


def _bomb(size: int) -> bytes:
    """~1 MiB of gzip: a tar whose one member header announces ``size`` bytes of zeros."""
    raw = io.BytesIO()
    with gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=9) as gz, tarfile.open(fileobj=gz, mode="w|") as tar:
        info = tarfile.TarInfo("kcp/data.json")
        info.size = size

        class Zeros(io.RawIOBase):
            left = size

            def readable(self) -> bool:
                return True

            def readinto(self, buffer: Any) -> int:
                count = min(len(buffer), self.left, 1 << 20)
                buffer[:count] = b"\0" * count
                self.left -= count
                return count

        tar.addfile(info, io.BufferedReader(Zeros(), 1 << 20))
    return raw.getvalue()


def test_a_tar_member_announcing_1_gib_is_refused_from_its_header(tmp_path: Path) -> None:
    bomb = tmp_path / "bomb.tar.gz"
    bomb.write_bytes(_bomb(1 << 30))
    assert bomb.stat().st_size < 2 << 20  # the file is small; what it inflates to is not
    probe = (
        "from kcp_opa.compile.bundle import read_bundle\n"
        "from kcp_opa.core.errors import BundleError\n"
        "try:\n"
        f"    read_bundle({str(bomb)!r})\n"
        "except BundleError as exc:\n"
        "    print('refused:', exc)\n"
        # VmHWM is this program's own peak: ru_maxrss also counts the forking parent (the test worker)
        "print(next(int(l.split()[1]) for l in open('/proc/self/status') if l.startswith('VmHWM:')) // 1024)\n"
    )
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=300, check=False)
    refused, peak = proc.stdout.strip().splitlines()
    assert refused.startswith("refused:"), proc.stdout + proc.stderr
    # Reading to the 512 MiB cap first would peak above it; refused from the header, ~30 MB.
    assert int(peak) < 200, f"peak memory {peak} MB before the refusal"
    assert "declares 1073741824 bytes" in refused  # refused from the member's header


def test_a_small_bundle_still_reads(bundle: Path) -> None:
    assert read_bundle(bundle).modules  # the header check refuses bombs, not bundles


def _transfer_to_another_tenant() -> dict[str, Any]:
    action = copy.deepcopy(KYA)
    action["target"] = {"type": "account", "reference": "acct_tenant_other_001"}  # tenant_id left out
    return action


def test_a_transfer_with_the_resource_tenant_left_out_is_context_missing_on_both_engines(bundle: Path) -> None:
    gate = vouched_gate(bundle)  # the host vouches for every other fact: only the tenant is missing
    decision = gate.decide(_transfer_to_another_tenant(), now="2026-07-17T08:00:00Z")
    assert decision.decision.value == "ESCALATE" and "context_missing" in decision.reason_codes
    assert "target.tenant_id" in json.dumps(decision.to_dict()["reasons"])
    assert not decision.execution_allowed
    document = gate.prepare(_transfer_to_another_tenant(), now="2026-07-17T08:00:00Z").document
    loaded = read_bundle(bundle)
    answers = [query(loaded, "data.kcp.gate.decision", document) for query in (regopy_query, opa_query)]
    for answer in answers:
        assert answer["decision"] == "ESCALATE" and "context_missing" in answer["reason_codes"], answer
    assert answers[0]["reason_codes"] == answers[1]["reason_codes"]
    # the same transfer naming the other tenant is the tenant_boundary DENY it always was
    named = _transfer_to_another_tenant()
    named["target"]["tenant_id"] = "tenant_other"
    assert "tenant_boundary" in gate.decide(named, now="2026-07-17T08:00:00Z").reason_codes
    # and the KYA seed's external beneficiary (the deployment's external_target_types) is unchanged
    assert gate.decide(KYA, now="2026-07-17T08:00:00Z").decision.value == "HUMAN_APPROVAL"
