"""Run a handful of realistic agent actions through Gate.decide() and show the decisions.

    make demo            # compiles bundles/ first, then runs this

The actions come from the decision-case corpus (fixtures/cases/), so the demo shows exactly
what the tests check. The gate writes every decision to the audit ledger ($KCP_OPA_LEDGER,
default audit/demo.jsonl) before returning it.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table

from kcp_opa import Gate, GateConfig, Verification, load_cases
from kcp_opa.authoring.casecontext import case_sources
from kcp_opa.trail.ledger import AuditLedger

ROOT = Path(__file__).resolve().parent.parent
LEDGER = Path(os.environ.get("KCP_OPA_LEDGER", ROOT / "audit" / "demo.jsonl"))
BUNDLES = Path(os.environ.get("KCP_OPA_BUNDLES", ROOT / "bundles"))
#: `make demo` signs the bundles: the public key they must verify under (unset: unsigned bundles).
VERIFY = [os.environ["KCP_OPA_VERIFICATION_KEY"]] if os.environ.get("KCP_OPA_VERIFICATION_KEY") else None
SHOWN = [
    ("support-desk", "sd-read-clean", "support agent reads a customer (own tenant)"),
    ("support-desk", "sd-cross-tenant-read", "support agent reads another tenant's customer"),
    ("customer-onboarding", "co-gdpr-minimisation-phone", "onboarding agent reads email, name, phone"),
    ("support-desk", "sd-refund-high-risk", "EUR 45 refund at medium risk"),
    ("support-desk", "sd-memory-write-high-risk", "agent writes to memory at high risk"),
    ("support-desk", "sd-send-by-other-role", "a billing bot sends a customer email"),
    ("finance", "fin-kya-supplier-payment", "USD 8,000 to a new supplier abroad (KYA)"),
    ("finance", "fin-small-known-payment", "USD 120 to a known supplier"),
    ("finance", "fin-screening-uncertain", "payment with uncertain sanctions screening"),
]
STYLE = {"DENY": "bold red", "ALLOW": "bold green", "ESCALATE": "bold magenta", "COMPLIANCE_REVIEW": "bold magenta"}


def main() -> int:
    cases = {
        (case.deployment, case.case_id): case
        for path in sorted((ROOT / "fixtures" / "cases").glob("*.yaml"))
        for case in load_cases(path)
    }
    gates: dict[str, Gate] = {}
    table = Table(title="kcp-opa: Gate.decide() on the reference deployments", show_lines=True)
    for column in ("action", "decision", "risk", "missing controls", "reasons", "approver"):
        table.add_column(column, overflow="fold")
    for deployment, case_id, label in SHOWN:
        if deployment not in gates:
            config = GateConfig(ledger=AuditLedger(LEDGER), verification=Verification.from_specs(VERIFY or ()))
            gates[deployment] = Gate.from_bundle(BUNDLES / f"{deployment}.tar.gz", config=config)
        case = cases[(deployment, case_id)]
        # What the gate knows for this case (its context: docs/decision-cases.md), never the action's word.
        sources, principal = case_sources(case.action, case.context, case.now)
        decision = gates[deployment].decide(case.action, now=case.now, principal=principal, context=sources)
        state = decision.decision.value
        table.add_row(
            f"{label}\n[dim]{deployment} · {case_id}[/dim]",
            f"[{STYLE.get(state, 'bold yellow')}]{state}[/]\n[dim]{decision.authorization_status.value}[/dim]",
            decision.risk_level.value,
            "\n".join(decision.missing_controls),
            "\n".join(decision.reason_codes),
            "\n".join(decision.verdict.approver_roles) or "-",
        )
    console = Console()
    if not console.is_terminal:
        console = Console(width=150)
    console.print(table)
    console.print(
        "Every decision above is a case in fixtures/cases/ and reproduces on the OPA reference engine.\n"
        f"[dim]Each was written to the audit ledger {LEDGER} before it was returned, which is what "
        "satisfies standard_audit_logging.[/dim]"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
