"""The differential fuzzer: mutated decision cases, evaluated on regopy and OPA, compared whole.

Actions start from the decision-case corpus (fixtures/cases, one file per reference deployment)
so most reach deep rules, then hypothesis mutates them: unit and project ids, action types,
requested actions, fields read, tenants, purposes, amounts around each threshold, delegation
chains of 0..6 hops, runtime facts, attribute flags, satisfied controls, and free-text fields
set to the hostile alphabet (tests/fuzz/hostile.py). Each action is checked by the gate's
contract; a refused one counts as refused. Every accepted one is prepared once
(``build_input``) with the context its case file declares (``context: {from_action: true}``:
the host vouches for what the MUTATED action states, through the real sources, so the
mutations reach real decisions instead of an ESCALATE ``context_missing``), and the FULL
decision document of each engine is compared as canonical JSON.

Self-contained on purpose (OPA through ``opa_bindings`` directly, regopy through
``RegopyEngine``): pointed at an older checkout (``KCP_FUZZ_REPO``, on ``PYTHONPATH``), it
measures that code's divergences with the same seeds.
"""

from __future__ import annotations

import contextlib
import copy
import datetime as dt
import json
import os
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import draws as st
import yaml
from gatecounts import COUNTERS, METERING, drawn_counters, drawn_metering
from hostile import hostile_text

from kcp_opa.authoring.cases import case_files, load_cases
from kcp_opa.compile.bundle import read_bundle
from kcp_opa.compile.compiler import CompileOptions, compile_bundle
from kcp_opa.core.errors import ActionRejectedError
from kcp_opa.decide.engine import DECISION_ENTRYPOINT, RegopyEngine
from kcp_opa.decide.gate import build_input

REPO = Path(os.environ.get("KCP_FUZZ_REPO") or Path(__file__).resolve().parents[2])
STATES = (
    "DENY", "COMPLIANCE_REVIEW", "ESCALATE", "HUMAN_APPROVAL", "IDENTITY_VERIFICATION",
    "STEP_UP_AUTHENTICATION", "USER_CONFIRMATION", "ALLOW",
)  # fmt: skip
CONTROLS = (
    "standard_audit_logging", "user_confirmation", "identity_verification", "authority_verification",
    "beneficiary_verification", "independent_human_approval", "compliance_review", "step_up_authentication",
)  # fmt: skip
FLAGS = (
    "new_device", "geo_anomaly", "stale_session", "sensitive_access", "stale_kyc", "identity_anomaly", "off_ramp",
    "account_control_change", "new_beneficiary", "modified_beneficiary", "screening_uncertain",
    "provider_conflict", "audit_failure", "irreversible", "material_irreversible", "high_risk_country",
)  # fmt: skip
MONEY_MOVING = ("payment", "cross_border_payment", "withdrawal", "refund", "transfer", "payout", "lending")
PURPOSES = (
    *("training", "TRAİNING", "Training", "ai_training", "MODEL_TRAINING", "Trai\u0307ning", "support", ""),
    # look-alike spellings (docs/input-contract.md, "Purposes"): folded to training, or refused
    *(
        "tr\u0430ining",
        "\u03a4R\u0391\u0399\u039d\u0399\u039dG",
        "\u1d1b\u0280\u1d00\u026a\u0274\u026a\u0274\u0262",
        "ai\u2013training",
    ),
    *("model\uff3ftraining", "trai\u200dning", "tra\u01c0ning", "tr\u0430ining\u0436", "\ufb01ne-tuning"),
)
# not_for entries of kcp-governance's v3-upgrade, as declared and folded-equal (lifecycle.rego).
PURPOSES += ("Initial KCP adoption (no prior version)", "\u0130NITIAL KCP ADOPTION (no prior version)")
FREE_TEXT = (
    ("scenario",), ("target", "reference"), ("target", "account_fingerprint"),
    ("authorization_context", "session_id"), ("trace", "tracestate"), ("attributes", "note"),
)  # fmt: skip


@dataclass
class Deployment:
    """A reference deployment: its bundle, both engines, its cases and the ids mutations draw from."""

    name: str
    bundle: Path
    cases: list[tuple[str, dict[str, Any], str]]
    #: Per case id, the context its file declares (None: no source; kcp_opa.authoring.casecontext).
    contexts: dict[str, Any]
    projects: list[str]
    units: list[str]
    fields: list[str]
    task_types: list[str]
    currencies: list[str]
    thresholds: list[int]
    scopes: list[str]
    environments: list[str] = field(default_factory=list)
    roles: list[str] = field(default_factory=list)
    auth_scopes: list[str] = field(default_factory=list)
    #: not_for entries as declared: the purposes an action states to hit them (mutated or not).
    purposes: list[str] = field(default_factory=list)
    #: Per case id, the counts its file gives (``base_counters``/``counters``), or None.
    counters: dict[str, Any] = field(default_factory=dict)
    #: The matrix's parameters (budgets, velocity) and every rate limit the manifest declares: what the
    #: gate counts, so the fuzzer draws counts on each side of every declared bound.
    parameters: dict[str, Any] = field(default_factory=dict)
    rate_limits: list[int] = field(default_factory=list)
    regopy: Any = None
    opa: Any = None

    def engines(self) -> None:
        from opa_bindings import OpaEngine

        loaded = read_bundle(self.bundle)
        # As the gate starts it: planned in a child, deciding with the plan the child built.
        self.regopy = RegopyEngine(loaded, DECISION_ENTRYPOINT)
        self.opa = OpaEngine()
        for name, source in sorted(loaded.modules.items()):
            self.opa.add_policy(name, source)
        self.opa.add_data(dict(loaded.data))


def load_world(directory: Path | None = None) -> dict[str, Deployment]:
    """Compile the reference deployments and gather what the mutations draw from."""
    out = directory or Path(tempfile.mkdtemp(prefix="kcp-opa-fuzz-"))
    return {name: load_deployment(name, out) for name in sorted(cases_by_deployment())}


def load_deployment(name: str, out: Path) -> Deployment:
    """Reference deployment NAME compiled into OUT, with what the mutations draw from (no engines yet)."""
    base = REPO / "fixtures" / "deployments" / name
    bundle = out / f"{name}.tar.gz"
    compile_bundle(
        [base / "knowledge.yaml"],
        base / "matrix.yaml",
        REPO / "policies",
        bundle,
        options=CompileOptions(engine_check=False),
    )
    manifest = yaml.safe_load((base / "knowledge.yaml").read_text())
    matrix = yaml.safe_load((base / "matrix.yaml").read_text())
    return make_deployment(name, bundle, cases_by_deployment()[name], manifest, matrix)


def cases_by_deployment() -> dict[str, list[Any]]:
    by_deployment: dict[str, list[Any]] = {}
    for path in case_files(REPO / "fixtures" / "cases"):  # pinned fuzz cases sit in files of their own
        for case in load_cases(path):
            by_deployment.setdefault(case.deployment, []).append(case)
    return by_deployment


def make_deployment(name: str, bundle: Path, cases: list[Any], manifest: dict[str, Any],
                    matrix: dict[str, Any]) -> Deployment:  # fmt: skip
    """The deployment, with the ids and values its (possibly mutated) declarations hold."""
    money = (matrix.get("parameters") or {}).get("money") or {}
    limits = {**money.get("high_value_minor", {}), **money.get("confirmation_minor", {})}
    actions = [(c.case_id, dict(c.action), c.now) for c in cases]
    units = [u for u in manifest.get("units", []) if isinstance(u, dict)]
    return Deployment(
        name=name,
        bundle=bundle,
        cases=actions,
        contexts={c.case_id: getattr(c, "context", None) for c in cases},
        projects=[str(manifest["project"])],
        units=[str(u["id"]) for u in units],
        fields=sorted({str(f) for u in units for f in (u.get("compliance") or {}).get("declared_fields", [])}),
        task_types=sorted(str(t) for t in matrix.get("task_types", {})),
        currencies=sorted(set(limits) | {"EUR", "USD", "JPY"}),
        thresholds=sorted({v + d for v in [*money.get("high_value_minor", {}).values(), 0] for d in (-1, 0, 1)}
                          - {-1}),
        scopes=sorted({s for _, a, _ in actions for s in a.get("authorization_context", {}).get(
            "agent_scope", [])}),
        environments=sorted(_condition_values(manifest, "environment")),
        roles=sorted(_condition_values(manifest, "agent_role")),
        auth_scopes=sorted({str(u["auth_scope"]) for u in units if "auth_scope" in u}),
        purposes=sorted({str(p) for u in units for p in u.get("not_for") or [] if isinstance(p, str)}),
        counters={c.case_id: getattr(c, "counters", None) for c in cases},
        parameters=dict((matrix.get("parameters") or {}) if isinstance(matrix.get("parameters"), dict) else {}),
        rate_limits=sorted({n for block in [manifest, *units] if isinstance(block.get("rate_limits"), dict)
                            for tier in block["rate_limits"].values() if isinstance(tier, dict)
                            for n in tier.values() if isinstance(n, int) and not isinstance(n, bool)}),
    )  # fmt: skip


def _condition_values(manifest: dict[str, Any], key: str) -> set[str]:
    """The environments or roles the manifest's visibility conditions list (KCP §4.16)."""
    blocks = [manifest.get("visibility"), *(u.get("visibility") for u in manifest.get("units", []))]
    values: set[str] = set()
    for block in blocks:
        for condition in (block or {}).get("conditions", []) if isinstance(block, dict) else []:
            listed = (condition.get("when") or {}).get(key, [])
            values.update(v for v in ([listed] if isinstance(listed, str) else listed) if isinstance(v, str))
    return values


_identifier = st.identifier()


def _set(action: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
    node = action
    for part in path[:-1]:
        child = node.get(part)
        if not isinstance(child, dict):
            child = node[part] = {}
        node = child
    node[path[-1]] = value


@st.composite
def mutated_actions(draw: Any, deployment: Deployment) -> tuple[str, dict[str, Any], str, list[str]]:
    """(case id, mutated action, decision time, satisfied controls)."""
    case_id, base, now = draw(st.sampled_from(deployment.cases))
    action = copy.deepcopy(base)
    d = deployment
    for _ in range(draw(st.integers(0, 5))):
        kind = draw(st.integers(0, 14))
        if kind == 0:
            unit = draw(st.sampled_from([*d.units, "unknown-unit"]) | _identifier)
            fields = draw(st.lists(st.sampled_from([*d.fields, "phone", "phone_", "ssn"]), max_size=5, unique=True))
            project = draw(st.sampled_from([*d.projects, "other-project"]))
            action["knowledge"] = {**action.get("knowledge", {}), "project": project, "unit": unit,
                                   "fields_read": fields}  # fmt: skip
        elif kind == 1:
            action.pop(draw(st.sampled_from(["knowledge", "runtime", "trace", "amount", "delegation_chain"])), None)
        elif kind == 2:
            action["action_type"] = draw(st.sampled_from([*d.task_types, *MONEY_MOVING, "teleport"]))
        elif kind == 3:
            requested = draw(st.sampled_from([*d.scopes, "close_account"]) | _identifier)
            action["requested_action"] = requested
            if draw(st.booleans()):
                scope = action.setdefault("authorization_context", {}).setdefault("agent_scope", [])
                scope.append(requested)
        elif kind == 4 and isinstance(action.get("knowledge"), dict):
            action["knowledge"]["fields_read"] = draw(
                st.lists(st.sampled_from([*d.fields, "phone", "phone.x", "a:b"]) | _identifier, max_size=12)
            )
        elif kind == 5:
            tenants = ["tenant_a", "tenant_b", "tenant_demo", "tenant_a:eu"]
            action["tenant_id"] = draw(st.sampled_from(tenants))
            target = action.setdefault("target", {"type": "record", "reference": "r1"})
            if draw(st.booleans()):
                target["tenant_id"] = draw(st.sampled_from(tenants))
            else:
                target.pop("tenant_id", None)
        elif kind == 6:
            _set(action, ("knowledge", "purpose"), draw(st.sampled_from([*PURPOSES, *d.purposes]) | hostile_text))
            action["knowledge"].setdefault("project", d.projects[0])
            action["knowledge"].setdefault("unit", draw(st.sampled_from(d.units)))
        elif kind == 7:
            action["amount"] = {"value_minor": draw(st.sampled_from(d.thresholds) | st.integers(0, 10**9)),
                                "currency": draw(st.sampled_from(d.currencies))}  # fmt: skip
        elif kind == 8:
            # Narrowing by ":" suffix, near misses (read:casefile), empty segments and repeats:
            # the attenuation check's edges; up to the contract's 8 hops.
            caps = [*d.scopes, "read", "read:case", "read:case:summary", "read:casefile", "read:",
                    "execute_payment:limited", "execute_payment:limited:eu", "*", "a::b", "a:"]  # fmt: skip
            hops = draw(st.integers(0, 6) | st.just(8))
            action["delegation_chain"] = [
                {"agent_id": f"agent_{i}", "capabilities": draw(st.lists(st.sampled_from(caps), max_size=6))}
                for i in range(hops)
            ]
        elif kind == 9:
            runtime = action.setdefault("runtime", {})
            runtime["deployment_region"] = draw(st.sampled_from(["EU", "UK", "US", "SG", "eu-west-1"]))
            runtime["risk_level"] = draw(st.sampled_from(["low", "medium", "high", "critical"]))
            runtime["evidence_status"] = draw(st.sampled_from(["present", "missing", "stale", "forbidden"]))
            runtime["budget_state"] = draw(st.sampled_from(["within_budget", "approval_threshold", "exhausted"]))
            model = {"id": draw(st.sampled_from(["m", "gpt-x", "local/llm"]))}
            if draw(st.booleans()):
                model["hosting"] = draw(st.sampled_from(["external", "self_hosted"]))
            runtime["model"] = model
        elif kind == 10:
            flags = draw(st.lists(st.sampled_from(FLAGS), max_size=3, unique=True))
            action["attributes"] = {**action.get("attributes", {}), **{f: draw(st.booleans()) for f in flags}}
        elif kind == 11:
            _set(action, draw(st.sampled_from(FREE_TEXT)), draw(hostile_text))
            if draw(st.booleans()):
                action.setdefault("attributes", {})[draw(hostile_text) or "k"] = draw(hostile_text)
        elif kind == 12:
            target = action.setdefault("target", {"type": "record", "reference": "r1"})
            target[draw(st.sampled_from(["country", "region"]))] = draw(st.sampled_from(["SG", "DE", "US", "EU", "CN"]))
        elif kind == 13:
            context = action.setdefault("authorization_context", {"requested_by": "user_1", "agent_scope": []})
            context["actor_role"] = draw(st.sampled_from(["support_agent", "finance_reviewer", "manager", "intern"]))
            context["requested_by"] = draw(st.sampled_from([action.get("subject_id", "u"), action.get("agent_id", "a"),
                                                            "someone_else"]))  # fmt: skip
            # KCP §4.16/§4.11: the environment and role visibility matches on, the principal and
            # scopes access checks; each present, absent or off the declared values.
            roles = [*d.roles, "support_agent", "intern"]
            _maybe(draw, context, "actor_role", st.sampled_from(roles))
            _maybe(draw, action.setdefault("runtime", {}), "environment",
                   st.sampled_from([*d.environments, "staging", "moon-base"]))  # fmt: skip
            _maybe(draw, context, "authenticated_principal", st.sampled_from(["user_1", "svc:ops", "someone_else"]))
            _maybe(draw, context, "principal_scopes",
                   st.lists(st.sampled_from([*d.auth_scopes, "read:knowledge", "other"]), max_size=3))  # fmt: skip
        elif draw(st.integers(0, 3)) == 0:  # rarely, an identifier the contract refuses: NUL, a space, a quote...
            bad = draw(st.sampled_from(["tenant_a\x00tenant_b", "phone ", 'a"b', "TRAİNING", "x\u200b"]))
            path = draw(st.sampled_from([("tenant_id",), ("requested_action",), ("target", "tenant_id")]))
            _set(action, path, bad)
    controls = draw(st.lists(st.sampled_from(CONTROLS), max_size=4, unique=True))
    if draw(st.integers(0, 3)) == 0:
        action[EXCEPTIONS] = draw(st.lists(_exception(action, now), max_size=2))
    if d.parameters.get("budgets") or d.parameters.get("velocity") or d.rate_limits:
        # The gate's counts and attested spend for the mutated action (tests/fuzz/gatecounts.py).
        action[COUNTERS] = draw(drawn_counters(d.parameters, d.rate_limits, d.counters.get(case_id), action))
        action[METERING] = draw(drawn_metering(d.parameters, action, now))
    # A second either side of the case's time: the lifecycle cases sit on temporal window bounds.
    return case_id, action, _shifted(now, draw(st.sampled_from([0, 0, -1, 1]))), controls


#: Where a drawn action carries the exceptions the fuzzer puts in ``input.context.exceptions``
#: (popped before the action is checked: the gate, not the action, holds exceptions).
EXCEPTIONS = "__fuzz_exceptions"
_WAIVES = ["field_access_violation", "unit_stale", "matrix_confirm", "matrix_approve", "external_llm_forbidden",
           "tenant_boundary", "matrix_forbidden", "fields_read_missing"]  # fmt: skip


@st.composite
def _exception(draw: Any, action: dict[str, Any], now: str) -> dict[str, Any]:
    """One verified exception as the gate passes it: a scope around the action, codes, a window
    around the decision time (to the second), sometimes malformed (the policy must ignore it)."""
    at = int(dt.datetime.strptime(now, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=dt.UTC).timestamp())
    knowledge = action.get("knowledge") if isinstance(action.get("knowledge"), dict) else {}
    unit = f"{knowledge.get('project')}/{knowledge.get('unit')}"
    scope_values = {
        "tenant_id": st.sampled_from([action.get("tenant_id"), "tenant_b"]),
        "unit": st.sampled_from([unit, "other/unit"]),
        "agent_id": st.sampled_from(["case-agent", str(action.get("agent_id"))]),
        "task_type": st.sampled_from([action.get("action_type"), "send"]),
        "region": st.just("EU"),
    }
    keys = draw(st.lists(st.sampled_from(sorted(scope_values)), min_size=0, max_size=3, unique=True))
    start = at + draw(st.sampled_from([-3600, -1, 0, 1]))
    end = at + draw(st.sampled_from([-1, 0, 1, 3600, 40 * 86400]))
    item: dict[str, Any] = {
        "id": draw(st.sampled_from(["EXC-1", "EXC-2", "exc.a", "EXC-1-"])),
        "scope": {k: draw(scope_values[k]) for k in keys},
        "waives": draw(st.lists(st.sampled_from(_WAIVES), min_size=1, max_size=3, unique=True)),
        "reason": "fuzz", "ticket": "CHG-1", "grantor": "dpo@example.com", "issuer": "change-board",
        "issued_at": "x", "expires_at": "2026-12-01T00:00:00Z",
        "not_before_epoch_seconds": start, "expires_epoch_seconds": end,
    }  # fmt: skip
    if draw(st.integers(0, 7)) == 0:
        item.pop(draw(st.sampled_from(["ticket", "waives", "scope", "expires_epoch_seconds"])))
    return item


def _shifted(now: str, seconds: int) -> str:
    moment = dt.datetime.strptime(now, "%Y-%m-%dT%H:%M:%SZ") + dt.timedelta(seconds=seconds)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def _maybe(draw: Any, node: dict[str, Any], key: str, values: Any) -> None:
    """Set ``key`` from ``values``, drop it, or leave it as the case has it."""
    choice = draw(st.integers(0, 2))
    if choice == 0:
        node[key] = draw(values)
    elif choice == 1:
        node.pop(key, None)


def canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


@dataclass
class Tally:
    """What a run reached and found."""

    decisions: int = 0
    refused: int = 0
    crashes: list[dict[str, Any]] = field(default_factory=list)
    divergences: list[dict[str, Any]] = field(default_factory=list)
    states: Counter[str] = field(default_factory=Counter)
    reason_codes: Counter[str] = field(default_factory=Counter)
    refusals: Counter[str] = field(default_factory=Counter)
    #: Decisions by the gate context drawn beside the action: counters, attested spend, exceptions.
    drawn: Counter[str] = field(default_factory=Counter)
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "decisions": self.decisions,
            "refused": self.refused,
            "divergences": len(self.divergences),
            "crashes": len(self.crashes),
            "decisions_per_s": round(self.decisions / self.seconds, 1) if self.seconds else None,
            "states": dict(sorted(self.states.items())),
            "states_missing": [s for s in STATES if s not in self.states],
            "reason_codes": dict(sorted(self.reason_codes.items())),
            "refusals": dict(sorted(self.refusals.items())),
            "drawn": dict(sorted(self.drawn.items())),
            "divergence_examples": self.divergences[:25],
            "crash_examples": self.crashes[:25],
        }


def prepare(action: dict[str, Any], now: str, controls: list[str], declared: Any, counters: Any = None) -> Any:
    """The input both engines decide: the action, its controls, the context ``declared`` and the
    gate's ``counters`` (through the case sources, as a decision case's counts)."""
    sources = principal = None
    if declared or counters is not None:
        try:
            from kcp_opa.authoring.casecontext import case_sources
        except ImportError:  # an older checkout (KCP_FUZZ_REPO) before the context stage
            case_sources = None
        if case_sources is not None:
            with contextlib.suppress(TypeError, ValueError, AttributeError):  # build_input names why
                sources, principal = case_sources(action, declared, now, counters)
    if sources is None:
        return build_input(action, now=now, satisfied_controls=controls, decision_id="dec_fuzz")
    return build_input(action, now=now, satisfied_controls=controls, decision_id="dec_fuzz", context=sources,
                       principal=principal)  # fmt: skip


def compare(deployment: Deployment, case_id: str, action: dict[str, Any], now: str, controls: list[str],
            tally: Tally) -> str | None:  # fmt: skip
    """Decide one action on both engines; the divergence's description, or None."""
    exceptions, counters = action.get(EXCEPTIONS), action.get(COUNTERS)
    metering, metering_refused = action.get(METERING) or (None, [])
    action = {k: v for k, v in action.items() if k not in (EXCEPTIONS, COUNTERS, METERING)}
    try:
        prepared = prepare(action, now, controls, deployment.contexts.get(case_id), counters)
    except ActionRejectedError as refused:
        tally.refused += 1
        tally.refusals[refused.path.split("/")[1] if "/" in refused.path else "(root)"] += 1
        return None
    started = time.perf_counter()
    document = dict(prepared.document)
    document["context"] = {**document["context"], "trace_id": "fuzz"}  # generated ids never differ by engine
    if exceptions is not None:
        document["context"]["exceptions"] = exceptions
    if metering is not None:  # what the context stage lists after verifying each attestation
        document["context"]["metering"] = metering
    if metering_refused:
        document["context"]["attestations_refused"] = [
            *document["context"].get("attestations_refused", []),
            *metering_refused,
        ]
    regopy = deployment.regopy.evaluate(document)
    try:
        opa: Any = deployment.opa.eval_document("kcp.gate.decision", document)
        opa_error = None
    except Exception as exc:
        opa, opa_error = None, f"{type(exc).__name__}: {exc}"
    tally.seconds += time.perf_counter() - started
    tally.decisions += 1
    tally.drawn.update(name for name, given in (("counters", counters), ("metering", metering),
                                                ("metering_refused", metering_refused), ("exceptions", exceptions))
                       if given)  # fmt: skip
    if regopy.error is not None and opa_error is not None:
        tally.crashes.append({"deployment": deployment.name, "case": case_id, "regopy": regopy.error, "opa": opa_error,
                              "action": action})  # fmt: skip
        return f"both engines failed: {regopy.error} / {opa_error}"
    if isinstance(opa, dict):
        tally.states[str(opa.get("decision"))] += 1
        tally.reason_codes.update(str(c) for c in opa.get("reason_codes", []))
    same = regopy.error is None and opa_error is None and canonical(regopy.value) == canonical(opa)
    if same:
        return None
    tally.divergences.append({
        "deployment": deployment.name, "case": case_id, "now": now, "controls": controls, "action": action,
        "exceptions": exceptions, "counters": counters, "metering": [metering, metering_refused],
        "context": deployment.contexts.get(case_id),
        "regopy": regopy.value if regopy.error is None else {"engine_error": regopy.error},
        "opa": opa if opa_error is None else {"engine_error": opa_error},
    })  # fmt: skip
    return "regopy and OPA decided differently"
