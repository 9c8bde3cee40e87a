"""Done means: docs/deployment.md's one-machine script, run as written, takes the reference KYA
payment from a signed bundle through `kcp-opa decide` and `kcp-opa serve` to an executed payment,
with every fact signed on the command line (`kcp-opa facts sign`), none written in Python: the
beneficiary registry's posted to the running service (`POST /v1/facts`) after the payment escalated
``context_missing`` without them."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from conftest import REPO
from netkit import free_port

GUIDE = REPO / "docs" / "deployment.md"


def one_machine_script() -> str:
    """The sh block of the "One machine" section (the replicas' section has its own, not run here)."""
    section = GUIDE.read_text(encoding="utf-8").split("## One machine\n", 1)[1].split("\n## ", 1)[0]
    blocks = [b.split("\n```", 1)[0] for b in section.split("```sh\n")[1:]]
    assert len(blocks) == 1, "the one-machine section has one script"
    return blocks[0]


def test_the_one_machine_script_executes_the_reference_payment(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        "WORK": str(tmp_path),
        "PORT": str(free_port()),
    }
    proc = subprocess.run(
        ["bash", "-c", one_machine_script()],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    log = (tmp_path / "serve.log").read_text() if (tmp_path / "serve.log").exists() else ""
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:] + log[-3000:]

    # Without the beneficiary registry's facts, `decide` and the service's first decision escalate
    # context_missing; once the registry posted them (POST /v1/facts), the next decision is the
    # policy's answer with the facts present.
    served = [line for line in proc.stdout.splitlines() if re.match(r"[A-Z_]+ PENDING_CONTROLS( |$)", line)]
    assert len(served) == 2, proc.stdout[-3000:]
    assert served[0].startswith("ESCALATE PENDING_CONTROLS") and "context_missing" in served[0]
    assert served[1].startswith("HUMAN_APPROVAL PENDING_CONTROLS") and "context_missing" not in served[1]
    assert "context_missing" in proc.stdout.split(served[0])[0]  # decide, before the server started

    # The identity provider's fact was signed on the command line into the gate's file, bound to
    # the subject; the beneficiary registry's three were posted, bound to the payment's hash.
    attested = json.loads((tmp_path / "attestations.json").read_text())
    assert [(a["fact"], a["subject_id"]) for a in attested] == [("evidence_status", "user_001")]
    entries = [json.loads(line) for line in (tmp_path / "service.jsonl").read_text().splitlines()[1:]]
    posted = [e["detail"] for e in entries if e.get("note") == "fact_posted"]
    assert sorted(p["fact"] for p in posted) == ["modified_beneficiary", "new_beneficiary", "screening_uncertain"]
    assert {p["issuer"] for p in posted} == {"bank-registry"} and all(p["action_hash"] for p in posted)

    # The payment ran once, under the receipt the service issued for this decision.
    issued = json.loads((tmp_path / "issued.json").read_text())
    executed = json.loads((tmp_path / "executed.json").read_text())
    assert executed["receipt_id"] == issued["receipt"]["receipt_id"]
    assert executed["replayed"] is False and executed["outcome"]["payment_ref"] == "PAY-0001"

    # The auditor's view: the chain is intact and holds the execution.
    assert "chain intact" in proc.stdout and "unbound" not in proc.stdout  # every entry signed by the writer
    kinds = [json.loads(line).get("type") for line in (tmp_path / "service.jsonl").read_text().splitlines()]
    assert "execution" in kinds
