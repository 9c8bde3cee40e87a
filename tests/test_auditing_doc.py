"""docs/auditing.md's commands run as written, in a checkout after `make demo` (here: a copy of one).

Each ```sh block of the page (the opa download excepted) runs, in order, in one bash with the
venv's kcp-opa on PATH; a block that fails fails the test with its output.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from conftest import DEPLOYMENTS, POLICIES, REPO

from kcp_opa.compile.compiler import CompileOptions, compile_bundle


def test_every_command_in_auditing_md_runs_as_written(tmp_path: Path) -> None:
    (tmp_path / "fixtures").symlink_to(REPO / "fixtures")
    bundles = tmp_path / "bundles"
    for name in ("customer-onboarding", "support-desk", "finance"):
        base = DEPLOYMENTS / name
        trust = REPO / "fixtures" / "trust" / "registry.yaml"
        compile_bundle(
            [base / "knowledge.yaml"],
            base / "matrix.yaml",
            POLICIES,
            bundles / f"{name}.tar.gz",
            options=CompileOptions(trust_path=trust),
        )
    env = {**os.environ, "KCP_OPA_LEDGER": str(tmp_path / "audit" / "demo.jsonl"), "KCP_OPA_BUNDLES": str(bundles)}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"
    (tmp_path / "audit").mkdir()
    for script in ("decide_demo.py", "supplier_payment_flow.py"):
        done = subprocess.run(
            [sys.executable, str(REPO / "examples" / script)], env=env, capture_output=True, text=True, check=False
        )
        assert done.returncode == 0, done.stderr[-2000:]
    page = (REPO / "docs" / "auditing.md").read_text(encoding="utf-8")
    blocks = [b for b in re.findall(r"```sh\n(.*?)```", page, flags=re.DOTALL) if "curl " not in b]
    assert len(blocks) >= 3
    script = "set -euo pipefail\n" + "\n".join(
        f"echo '--- block {index}'\n{block}" for index, block in enumerate(blocks)
    )
    done = subprocess.run(["bash", "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True, check=False)
    assert done.returncode == 0, (done.stdout[-3000:], done.stderr[-3000:])
    # verify exits 1 on any failed check, so set -e already proved the case; the files are there too.
    assert (tmp_path / "case" / "case.json").exists() and (tmp_path / "report.html").exists()
    assert (tmp_path / "proof-case" / "checkpoint.note").exists() and not (
        tmp_path / "proof-case" / "chain.jsonl"
    ).exists()
