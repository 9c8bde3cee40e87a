"""`make demo`: the main job on the reference deployments, one line a step, the details in a log.

    make demo                      # runs this with the Makefile's key, registry and deployments
    python examples/demo.py --signing-key .demo-keys/bundle-signing.pem

Validate, explain, compile and sign each deployment, inspect, decide, the two Python flows
(decide_demo.py, supplier_payment_flow.py), then the auditor's commands (verify, replay, query,
report, a case file and its verification), prove and diff. Every command and its full output go
to audit/demo.log; the screen gets one line per step with its key result. A step that fails
prints the tail of its output and the demo exits 1. Paths are relative to the working directory
(the repository root under `make`).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parent
TAIL = 25  # lines of a failing step's output shown on the screen
WIDTH = 28  # the step names' column
SHOWN = 110  # a result's characters on the screen
STATES = r"(ALLOW|DENY|ESCALATE|HUMAN_APPROVAL|USER_CONFIRMATION|COMPLIANCE_REVIEW)"


@dataclass
class Step:
    """One line on the screen: ``commands`` run in order (built when the step starts, so they may
    read what earlier steps wrote); ``result`` reads their joined output."""

    name: str
    commands: Callable[[], list[list[str]]]
    result: Callable[[str], str]
    env: dict[str, str] = field(default_factory=dict)


def _first(pattern: str, output: str) -> str:
    """The first match of ``pattern`` in ``output`` (its group), whitespace collapsed; ``?`` if none."""
    found = re.search(pattern, output, flags=re.MULTILINE)
    return " ".join(found.group(1).split()) if found else "?"


def _count(pattern: str, output: str) -> int:
    return len(re.findall(pattern, output, flags=re.MULTILINE))


def _row(output: str, name: str) -> str:
    """The value of a text table's row ``│ name │ value │``."""
    return _first(rf"^[│|]\s*{re.escape(name)}\s*[│|]\s*(.+?)\s*[│|]\s*$", output)


def _decision(output: str) -> str:
    """`decide`'s JSON document: its routing state, risk and what it still needs."""
    document = json.loads(output)
    missing = len(document.get("missing_controls", []))
    return f"{document['decision']} risk {document['risk_level']}, {missing} controls missing"


def _states(output: str) -> str:
    """decide_demo.py's table: how many actions reached each routing state."""
    states = re.findall(rf"^[│|][^│|]*[│|] {STATES}\b", output, flags=re.MULTILINE)
    counted = ", ".join(f"{state} {states.count(state)}" for state in sorted(set(states)))
    return f"{len(states)} actions decided: {counted}"


def _payment(output: str) -> str:
    """supplier_payment_flow.py: the controls passed, the execution, what was refused before and after it."""
    before, _, after = output.partition("\nexecuted ")
    refused = re.findall(r"^refused .*: (\w+)$", after, flags=re.MULTILINE)
    passed, forged = _count(r"^PASSED ", before), _count(r"^refused ", before)
    executed = _first(r"^(\S+):", after)
    return (
        f"{passed} controls passed ({forged} forged refused), executed {executed}; then refused: {', '.join(refused)}"
    )


def _diff(output: str) -> str:
    """`kcp-opa diff`: its verdict and how many sampled actions changed."""
    verdict, actions = _first(r"^diff \S+ -> \S+: (.+)$", output), _first(r"^  (\d+ actions) ", output)
    changed = _first(r", (\d+ changed),", output)
    return f"{verdict}: {actions}, {changed}"


def _prove(output: str) -> str:
    verdict, proved = _first(r"^prove .*: (\w+)$", output), _first(r"what was proved: ([^;]+)", output)
    return f"{verdict}: {proved}"


def _replay(output: str) -> str:
    erased = set(re.findall(r"^erased line (\d+) ", output, flags=re.MULTILINE))
    return f"{_first(r'^(.+)$', output)}; {len(erased)} erased under no-logging (not reproducible)"


def _query(output: str) -> str:
    return f"{_first(r'^([0-9]+) entries', output)} DENY decisions"


def _signed(output: str) -> str:
    """`bundle verify`: the signer and the revision."""
    found = re.search(r"^verified \S+: revision ([0-9a-f]{12})[0-9a-f]*, sha256 \S+, signed by (\S+)", output, re.M)
    return f"signed by {found.group(2)}, revision {found.group(1)}, verified" if found else "?"


def _lines(path: Path) -> int:
    with path.open("rb") as handle:
        return sum(1 for _ in handle)


class Demo:
    """The steps `make demo` runs, over the bundle key, trust registry and deployments given."""

    def __init__(self, signing_key: Path, trust: Path, deployments: Path, audit: Path, bundles: Path) -> None:
        self.signing_key, self.trust, self.deployments = signing_key, trust, deployments
        self.audit, self.bundles, self.ledger = audit, bundles, audit / "demo.jsonl"
        self.verify = ["--verification-key", f"{signing_key}.pub"]

    def steps(self) -> list[Step]:
        ledger, trust, verify, audit = str(self.ledger), str(self.trust), self.verify, self.audit
        support = str(self.bundles / "support-desk.tar.gz")
        flows = {"KCP_OPA_VERIFICATION_KEY": f"{self.signing_key}.pub", "KCP_OPA_LEDGER": ledger}
        flows["KCP_OPA_BUNDLES"] = str(self.bundles)
        declared = sorted(str(path) for path in self.deployments.glob("*/*.yaml"))
        onboarding = str(self.deployments / "customer-onboarding" / "knowledge.yaml")
        decide = ["decide", "--bundle", str(self.bundles / "finance.tar.gz")]
        decide += [
            "--input",
            "fixtures/kya-supplier-payment-action.json",
            "--context",
            "fixtures/context/host-vouched.yaml",
        ]
        decide += ["--now", "2026-11-29T10:00:00Z", "--ledger", ledger, *verify]
        case = ["case", "verify", str(audit / "case"), "--trust", trust]
        case += ["--receipt-keyring", str(audit / "demo-receipt-keys.json"), *verify, "--format", "text"]
        versions = ["diff", "tests/fixtures/analysis/round-one-support-desk.tar.gz", support]
        versions += ["--budget", "300", "--allow-weakening"]
        return [
            Step(
                "validate",
                lambda: [_kcp("validate", "--format", "text", *declared, trust)],
                lambda out: _first(r"^(\d+ file\(s\): .*)$", out),
            ),
            Step(
                "explain",
                lambda: [_kcp("explain", "--format", "text", onboarding, "gdpr_data_minimisation")],
                lambda out: _first(r"^(.+)$", out),
            ),
            *(self._compile(path) for path in sorted(p for p in self.deployments.iterdir() if p.is_dir())),
            Step(
                "inspect",
                lambda: [
                    _kcp("inspect", "--format", "text", str(self.bundles / "customer-onboarding.tar.gz"), *verify)
                ],
                lambda out: f"{_row(out, 'manifest')}, revision {_row(out, 'revision')[:12]}",
            ),
            Step("decide", lambda: [_kcp(*decide)], lambda out: f"{_decision(out)} ({ledger})"),
            Step("decide_demo.py", lambda: [[sys.executable, str(EXAMPLES / "decide_demo.py")]], _states, flows),
            Step(
                "supplier_payment_flow.py",
                lambda: [[sys.executable, str(EXAMPLES / "supplier_payment_flow.py")]],
                _payment,
                flows,
            ),
            Step(
                "audit verify",
                lambda: [_kcp("audit", "verify", "--format", "text", ledger)],
                lambda out: _first(r"^ok \S+: (\d+ entries, chain intact)", out),
            ),
            Step(
                "audit replay",
                lambda: [_kcp("audit", "replay", "--format", "text", ledger, "--bundles", str(self.bundles), *verify)],
                _replay,
            ),
            Step(
                "audit query",
                lambda: [_kcp("audit", "query", "--format", "text", ledger, "--decision", "DENY")],
                _query,
            ),
            Step(
                "audit report",
                lambda: [_kcp("audit", "report", ledger, "--trust", trust, "--html", str(audit / "report.html"))],
                lambda out: f"{audit / 'report.html'} ({(audit / 'report.html').stat().st_size // 1024} KiB)",
            ),
            Step("audit case", self._case, lambda out: _first(r"^wrote (.+)$", out)),
            Step(
                "audit case verify",
                lambda: [_kcp("audit", *case, "--expect-head", str(_lines(self.ledger) - 1))],
                lambda out: f"{_count(r'^ok  ', out)} checks ok: {_first(r'^ok: (.+)$', out)}",
            ),
            Step("prove", lambda: [_kcp("prove", support, "--budget", "300", *verify)], _prove),
            # two policy versions: round one's bundle (unsigned, from git history) against today's signed one
            Step("diff versions", lambda: [_kcp(*versions)], _diff),
            # the signed bundle, verified, against its declarations compiled on the fly: no change
            Step(
                "diff source",
                lambda: [_kcp("diff", support, str(self.deployments / "support-desk"), "--budget", "100", *verify)],
                _diff,
            ),
        ]

    def _compile(self, deployment: Path) -> Step:
        """Compile and sign one deployment into its bundle, then verify the signature."""
        bundle = str(self.bundles / f"{deployment.name}.tar.gz")
        compile_ = ["compile", *sorted(str(p) for p in deployment.glob("knowledge*.yaml"))]
        compile_ += ["--matrix", str(deployment / "matrix.yaml"), "--trust", str(self.trust), "--policies", "policies"]
        compile_ += ["--output", bundle, "--signing-key", str(self.signing_key), "--format", "text"]
        commands = [_kcp(*compile_), _kcp("bundle", "verify", bundle, *self.verify, "--format", "text")]
        return Step(f"compile {deployment.name}", lambda: commands, _signed)

    def _case(self) -> list[list[str]]:
        """A case file for the last receipt's decision, anchored by a checkpoint key made here."""
        keys, case = self.audit / "checkpoint-keys.json", self.audit / "case"
        shutil.rmtree(case, ignore_errors=True)
        keys.unlink(missing_ok=True)
        query = [sys.executable, "-m", "kcp_opa", "audit", "query", str(self.ledger), "--type", "receipt"]
        found = subprocess.run([*query, "--format", "json"], capture_output=True, text=True, check=True)
        decision_id = json.loads(found.stdout)[-1]["decision_id"]
        gather = ["audit", "case", str(self.ledger), decision_id, "-o", str(case), "--trust", str(self.trust)]
        gather += ["--keyring", str(keys), "--receipt", str(self.audit / "demo-receipt.json")]
        gather += ["--receipt-keyring", str(self.audit / "demo-receipt-keys.json"), *self.verify]
        return [_kcp("receipt", "keygen", "--kid", "demo-checkpoint", "--keyring", str(keys)), _kcp(*gather)]


def _kcp(*arguments: str) -> list[str]:
    return ["kcp-opa", *arguments]


def run(steps: Sequence[Step], log: Path, *, out: Callable[[str], None] = print) -> int:
    """Run ``steps`` in order, every command and its output into ``log``; 0, or 1 at the first failure.

    A ``kcp-opa`` command runs as ``python -m kcp_opa`` with this interpreter (the log shows it as typed)."""
    log.parent.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    with log.open("w", encoding="utf-8") as written:
        for index, step in enumerate(steps, 1):
            began, outputs, failure = time.monotonic(), [], ""
            try:
                commands = step.commands()
            except (subprocess.CalledProcessError, OSError, ValueError, LookupError) as exc:
                commands, failure = [], f"could not prepare the step: {exc}"
                outputs.append(str(getattr(exc, "stderr", "") or exc))
            for command in commands:
                argv = [sys.executable, "-m", "kcp_opa", *command[1:]] if command[0] == "kcp-opa" else command
                env = {**os.environ, "COLUMNS": "120", **step.env}  # text tables as wide as a terminal's
                done = subprocess.run(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
                written.write(f"$ {shlex.join(command)}\n{done.stdout}[exit {done.returncode}]\n\n")
                written.flush()
                outputs.append(done.stdout)
                if done.returncode != 0:
                    failure = f"{shlex.join(command)[:80]} exited {done.returncode}"
                    break
            seconds = time.monotonic() - began
            if failure:
                written.write(f"# step {step.name} FAILED: {failure}\n")
                out(f"{index:2d} {step.name:<{WIDTH}} FAILED ({seconds:.0f}s): {failure}")
                for line in "".join(outputs).splitlines()[-TAIL:]:
                    out(f"   | {line}")
                out(f"every command and its output: {log}")
                return 1
            try:
                result = step.result("".join(outputs))
            except (ValueError, LookupError, OSError) as exc:  # the step passed; its output could not be summed up
                result = f"done (see the log: {exc})"
            out(f"{index:2d} {step.name:<{WIDTH}} {result[:SHOWN]} ({seconds:.0f}s)")
    out(f"{len(steps)} steps passed in {time.monotonic() - started:.0f}s; every command and its output: {log}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--signing-key", type=Path, required=True, help="the bundle signing key (its .pub beside it)")
    parser.add_argument("--trust", type=Path, default=Path("fixtures/trust/registry.yaml"), help="the trust registry")
    parser.add_argument("--deployments", type=Path, default=Path("fixtures/deployments"), help="one directory each")
    parser.add_argument("--audit", type=Path, default=Path("audit"), help="the ledger, report, case and demo.log")
    parser.add_argument("--bundles", type=Path, default=Path("bundles"), help="where the signed bundles go")
    parser.add_argument("--only", help="run only these steps (comma-separated names), e.g. validate,explain")
    args = parser.parse_args(argv)
    demo = Demo(args.signing_key, args.trust, args.deployments, args.audit, args.bundles)
    steps = demo.steps()
    if args.only:
        wanted = {name.strip() for name in args.only.split(",")}
        unknown = wanted - {step.name for step in steps}
        if unknown:
            parser.error(f"no step {', '.join(sorted(unknown))}; the steps: {', '.join(s.name for s in steps)}")
        steps = [step for step in steps if step.name in wanted]
    else:
        demo.ledger.unlink(missing_ok=True)  # the whole demo starts a fresh ledger
    return run(steps, args.audit / "demo.log")


if __name__ == "__main__":
    sys.exit(main())
