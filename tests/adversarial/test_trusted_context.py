"""Attack class: an agent talks itself into a laxer decision by stating facts about itself.

For every gate or attested fact the policy reads (the list is generated from the evaluators'
METADATA ``custom.facts``, so a new fact without an entry in TABLE fails here), an agent calls
a real ``kcp-opa serve`` and states, in the same action, first the strictest and then the
laxest value of that fact. The gate knows the strict value (the trust registry's entry for the
agent, its own --region/--environment, a signed attestation), so the laxest statement must get
a decision no weaker: a routing state at least as strong, and on the same state every control
the strict statement got (issue 25).
"""

from __future__ import annotations

import copy
import datetime as dt
import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx2
import pytest
import yaml
from actionkit import case_action, finance_bound_payment, finance_payment, support_send
from conftest import DEPLOYMENTS, POLICIES
from servicekit import GATE_ISSUER, SERVICE_ISSUER, start_server, stop_server, write_registry, write_tokens

from kcp_opa.compile.compiler import CompileOptions, compile_bundle
from kcp_opa.context import sign_fact, sign_spend
from kcp_opa.core.signing import Keyring, generate_ed25519

STATES = ["ALLOW", "USER_CONFIRMATION", "STEP_UP_AUTHENTICATION", "IDENTITY_VERIFICATION", "HUMAN_APPROVAL"]
STATES += ["ESCALATE", "COMPLIANCE_REVIEW", "DENY"]
_BLOCK = re.compile(r"((?:^#.*\n)+)^findings contains finding if \{", re.MULTILINE)


def metadata_facts() -> dict[str, str]:
    """{fact: class} over every findings rule's METADATA ``custom.facts``."""
    found: dict[str, str] = {}
    for path in sorted((POLICIES / "kcp" / "evaluators").glob("*.rego")):
        if path.name.endswith("_test.rego"):
            continue
        for block in _BLOCK.findall(path.read_text()):
            meta = block[block.rindex("# METADATA") :]
            custom = yaml.safe_load("\n".join(line[2:] for line in meta.splitlines()[1:]))["custom"]
            for name, fact_class in (custom.get("facts") or {}).items():
                assert fact_class in {"gate", "attested"}, f"{path.name}: {name} has class {fact_class!r}"
                found[name] = fact_class
    return found


# -- what the gate knows ------------------------------------------------------------------------

AGENTS = {
    # Registered with the strictest values: a clerk's role, no granted scope, a self-hosted model.
    "ctx_plain": {
        "actor_role": "billing_bot",
        "agent_scope": [],
        "model": {"id": "ledger-llm", "hosting": "self_hosted"},
    },
    # An agent on an external LLM (its other facts lax, so only hosting can decide).
    "ctx_external": {
        "actor_role": "support_agent",
        "agent_scope": ["execute_payment", "prepare_payment", "kb.read", "email.send"],
        "model": {"id": "vendor-llm-2026", "hosting": "external"},
    },
}
SCOPES = ["read:knowledge", "treasury:beneficiaries", "treasury:payments"]  # KCP auth scopes the agents hold
TOKENS = {name: f"t-{name}-" + "x" * 32 for name in AGENTS}
LAX_FLAGS = {"evidence_status": "present", "new_beneficiary": False, "modified_beneficiary": False}
LAX_FLAGS["screening_uncertain"] = False
#: Attested per subject: each subject's one strict fact, every other fact lax.
SUBJECTS = {
    "user_001": {},
    "subj_evidence": {"evidence_status": "forbidden"},
    "subj_new": {"new_beneficiary": True},
    "subj_modified": {"modified_beneficiary": True},
    "subj_screening": {"screening_uncertain": True},
}
SERVERS = {  # deployment, --region, --environment
    "finance": ("finance", "EU", None),
    "support": ("support-desk", "EU", None),
    "visibility": ("kcp-visibility-access", "EU", "production"),
    "governance": ("kcp-governance", "US", None),  # residency [EU]: the gate runs outside it
    "budget": ("budget", "EU", None),  # the tenant's USD day budget, spent by metered agent runs
}
#: What the metering issuer attests the tenant's agent runs spent today: 4,999.50 of 5,000.00.
METERED_MINOR = 499950
NOW = dt.datetime.now(dt.UTC).replace(microsecond=0)
CREATED = (NOW - dt.timedelta(seconds=30)).strftime("%Y-%m-%dT%H:%M:%SZ")


def payment() -> dict[str, Any]:
    """A small supplier payment (below the high-value threshold), not bound to a unit."""
    action = finance_payment()
    action["amount"] = {"value_minor": 5000, "currency": "USD"}
    action["attributes"] = {}
    return action


def bound_payment() -> dict[str, Any]:
    """The same payment bound to the treasury unit (no-external-llm, evidence required)."""
    action = finance_bound_payment()
    action["amount"] = {"value_minor": 5000, "currency": "USD"}
    action["attributes"] = {}
    return action


def budget_payment() -> dict[str, Any]:
    """A 1.00 payment of the budget deployment's tenant: past its day budget only with the metered spend."""
    action = case_action("budget.yaml", "budget-within")
    action["amount"] = {"value_minor": 100, "currency": "USD"}
    return action


def email() -> dict[str, Any]:
    return support_send()


def ops_read() -> dict[str, Any]:
    return case_action("kcp-visibility-access.yaml", "va-visibility-default")


def handbook_read() -> dict[str, Any]:
    return case_action("kcp-governance.yaml", "gov-authority-default-read")


@dataclass(frozen=True)
class Attack:
    server: str
    agent: str
    action: Callable[[], dict[str, Any]]
    path: tuple[str, ...]
    strictest: Any
    laxest: Any
    subject: str = "user_001"
    #: Text the decision must not carry (a stated value that would be believed).
    never_names: tuple[str, ...] = field(default=())
    #: Whether the statement is of the fact itself, so a context_conflict must name it (an agent
    #: has no field for its metered spend: the nearest it can say is its budget_state).
    conflict: bool = True


#: For every gate and attested fact: the statement pair. The gate's value is the strictest.
TABLE: dict[str, Attack] = {
    "deployment_region": Attack("governance", "ctx_plain", handbook_read, ("runtime", "deployment_region"), "US", "EU"),
    "environment": Attack("visibility", "ctx_plain", ops_read, ("runtime", "environment"), "production", "staging"),
    "actor_role": Attack(
        "support", "ctx_plain", email, ("authorization_context", "actor_role"), "billing_bot", "support_agent"
    ),
    "agent_scope": Attack(
        "finance",
        "ctx_plain",
        payment,
        ("authorization_context", "agent_scope"),
        [],
        ["execute_payment", "prepare_payment"],
    ),
    "model_hosting": Attack(
        "finance",
        "ctx_external",
        bound_payment,
        ("runtime", "model"),
        {"id": "vendor-llm-2026", "hosting": "external"},
        {"id": "vendor-llm-2026", "hosting": "self_hosted"},
    ),
    "model_id": Attack(
        "finance",
        "ctx_external",
        bound_payment,
        ("runtime", "model"),
        {"id": "vendor-llm-2026", "hosting": "external"},
        {"id": "in-house-llm", "hosting": "external"},
        never_names=("in-house-llm",),
    ),
    "evidence_status": Attack(
        "finance", "ctx_plain", bound_payment, ("runtime", "evidence_status"), "forbidden", "present", "subj_evidence"
    ),
    "new_beneficiary": Attack(
        "finance", "ctx_plain", payment, ("attributes", "new_beneficiary"), True, False, "subj_new"
    ),
    "modified_beneficiary": Attack(
        "finance", "ctx_plain", payment, ("attributes", "modified_beneficiary"), True, False, "subj_modified"
    ),
    "screening_uncertain": Attack(
        "finance", "ctx_plain", payment, ("attributes", "screening_uncertain"), True, False, "subj_screening"
    ),
    "metered_spend": Attack(
        "budget",
        "ctx_external",
        budget_payment,
        ("runtime", "budget_state"),
        "exhausted",
        "within_budget",
        conflict=False,
    ),
}


def test_every_gate_and_attested_fact_the_policy_reads_has_an_attack() -> None:
    facts = metadata_facts()
    assert len(facts) >= 10, facts
    missing = sorted(set(facts) - set(TABLE))
    assert not missing, f"facts the policy reads with no strictest/laxest entry in TABLE: {missing}"
    assert not set(TABLE) - set(facts), "TABLE names a fact no rule reads"


def _registry(work: Path) -> tuple[Path, Path, Path]:
    """The service tests' registry plus the agents and a fact issuer; the signed attestations."""
    registry_path, keys_path = write_registry(work)
    registry = yaml.safe_load(registry_path.read_text())
    registry["principals"] += [
        {"id": name, "type": "ai_agent", "auth_scopes": SCOPES, **facts} for name, facts in AGENTS.items()
    ]
    attestor = generate_ed25519("ctx-attestor-ed25519")
    public = Keyring({attestor.kid: attestor}).to_file_dict(include_private=False)["keys"][0]["public_key"]
    registry["issuers"].append(
        {
            "id": "ctx-attestor",
            "type": "provider",
            "controls": [],
            "facts": sorted([*LAX_FLAGS, "metered_spend"]),
            "keys": [{"kid": attestor.kid, "alg": "Ed25519", "public_key": public}],
        }
    )
    registry_path.write_text(yaml.safe_dump(registry, sort_keys=False))
    expires = (NOW + dt.timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    issued = (NOW - dt.timedelta(minutes=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    items = [
        sign_fact(
            {"fact": fact, "value": value, "subject_id": subject, "issued_at": issued, "expires_at": expires},
            "ctx-attestor",
            attestor,
        )
        for subject, strict in SUBJECTS.items()
        for fact, value in {**LAX_FLAGS, **strict}.items()
    ]
    spent = {
        "budget": "tenant_daily_usd",
        "subject": "tenant_demo",
        "amount_minor": METERED_MINOR,
        "currency": "USD",
        "period_start": (NOW - dt.timedelta(hours=2)).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "period_end": (NOW - dt.timedelta(minutes=5)).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "issued_at": issued,
        "expires_at": expires,
    }
    items.append(sign_spend(spent, "ctx-attestor", attestor))
    attestations = work / "attestations.json"
    attestations.write_text(json.dumps(items))
    return registry_path, keys_path, attestations


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[[str], str]]:
    """Starts each server the first time a test needs it; stops them all at the end."""
    work = tmp_path_factory.mktemp("trusted")
    registry, issuer_keys, attestations = _registry(work)
    tokens = write_tokens(work, {token: name for name, token in TOKENS.items()})
    running: dict[str, tuple[Any, str]] = {}

    def url(name: str) -> str:
        if name not in running:
            deployment, region, environment = SERVERS[name]
            base = DEPLOYMENTS / deployment
            bundle = work / f"{name}.tar.gz"
            compile_bundle(
                [base / "knowledge.yaml"],
                base / "matrix.yaml",
                POLICIES,
                bundle,
                options=CompileOptions(trust_path=registry),
            )
            args = [
                "--bundle",
                str(bundle),
                "--store",
                str(work / f"{name}.db"),
                "--ledger",
                str(work / f"{name}.jsonl"),
            ]
            args += ["--trust", str(registry), "--issuer-id", SERVICE_ISSUER, "--issuer-id", GATE_ISSUER]
            args += ["--issuer-keyring", str(issuer_keys), "--tokens", str(tokens), "--attestations", str(attestations)]
            args += ["--region", region] + (["--environment", environment] if environment else [])
            running[name] = start_server(args)
        return running[name][1]

    try:
        yield url
    finally:
        for process, _ in running.values():
            stop_server(process)


def _stated(attack: Attack, agent: str, value: Any) -> dict[str, Any]:
    action = attack.action()
    action["subject_id"] = attack.subject
    action["agent_id"] = agent  # who acts is the caller: the facts are the caller's own
    action["created_at"] = CREATED
    context = action.setdefault("authorization_context", {"requested_by": attack.subject})
    context["authenticated_principal"] = agent  # over the service, only the caller may be stated
    node = action
    for part in attack.path[:-1]:
        node = node.setdefault(part, {})
    node[attack.path[-1]] = copy.deepcopy(value)
    return action


def _decide(url: str, agent: str, action: dict[str, Any]) -> dict[str, Any]:
    response = httpx2.post(
        f"{url}/v1/decisions",
        json={"action": action},
        headers={"Authorization": f"Bearer {TOKENS[agent]}"},
        timeout=120,
    )
    assert response.status_code == 200, response.text
    return dict(response.json())


def _weaker(lax: dict[str, Any], strict: dict[str, Any]) -> str | None:
    ranks = STATES.index(lax["decision"]), STATES.index(strict["decision"])
    if ranks[0] < ranks[1]:
        return f"{strict['decision']} -> {lax['decision']}"
    if ranks[0] == ranks[1] and not set(strict["required_controls"]) <= set(lax["required_controls"]):
        return f"controls {sorted(set(strict['required_controls']) - set(lax['required_controls']))} dropped"
    return None


@pytest.mark.parametrize("fact", sorted(TABLE))
def test_stating_the_laxest_value_buys_no_weaker_decision(fleet: Callable[[str], str], fact: str) -> None:
    attack = TABLE[fact]
    url = fleet(attack.server)
    strict = _decide(url, attack.agent, _stated(attack, attack.agent, attack.strictest))
    lax = _decide(url, attack.agent, _stated(attack, attack.agent, attack.laxest))
    weaker = _weaker(lax, strict)
    assert weaker is None, f"{fact}: stating {attack.laxest!r} instead of {attack.strictest!r}: {weaker}"
    assert strict["decision"] != "ALLOW" or strict["required_controls"] != ["standard_audit_logging"], (
        f"{fact}: the strict statement decides nothing, so the pair proves nothing: {strict['reason_codes']}"
    )
    judged = " ".join(r["message"] for r in lax["reasons"] if r["code"] != "context_conflict")
    for stated in attack.never_names:
        assert stated not in judged, f"{fact}: the decision was made on the stated {stated!r}: {judged}"
    # The differing statement is recorded, naming the fact, and the sources are shown.
    if attack.laxest != attack.strictest and attack.conflict:
        conflicts = [r for r in lax["reasons"] if r["code"] == "context_conflict"]
        assert conflicts and any(fact in r["message"] or "model" in r["message"] for r in conflicts), lax["reasons"]
    assert lax["context_sources"], lax
