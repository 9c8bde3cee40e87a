"""Decide generated actions on both engines and check them against the invariants, in Rego.

The decision is the bundle's own (regopy, as ``Gate`` evaluates it, with the audit ledger's
system control satisfied) and OPA's from the same input document; the invariants are Rego
(the contract's built-ins and a deployment's own) evaluated by regopy over
``{input, decision, facts, before, change}``. Python only counts and compares.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from kcp_opa.authoring.casecontext import case_sources
from kcp_opa.authoring.cases import SYSTEM_CONTROLS
from kcp_opa.authoring.regotest import opa_installed
from kcp_opa.compile.bundle import LoadedBundle
from kcp_opa.core.errors import ActionRejectedError, AnalysisError
from kcp_opa.core.jsonread import JsonDict, JsonObject, items, mapping, strings
from kcp_opa.decide.crosscheck import OpaReference, first_difference
from kcp_opa.decide.engine import RegopyEngine
from kcp_opa.decide.gate import build_input

INVARIANTS_ENTRYPOINT = "kcp/analysis/run/report"
#: The context every generated action is decided with (and its counterexample cases declare).
HOST_VOUCHED = {"from_action": True}
_PACKAGE = re.compile(r"^package\s+([A-Za-z_][A-Za-z0-9_.]*)\s*$", re.M)
_RULE = re.compile(r"^(invariant_[A-Za-z0-9_]+)\s*(?:if\b|:=|=|\{)", re.M)
_PREMISE = re.compile(r"^premise_([A-Za-z0-9_]+)\s*(?:if\b|:=|=|\{)", re.M)
#: The invariant OPA's cross-check is: a comparison in Python, its premise an action OPA decided.
ENGINES_AGREE = "contract.engines_agree"
#: The fields of a decision a report shows (``brief``).
BRIEF = ("decision", "execution_allowed", "reason_codes", "required_controls", "engine_error")


def brief(decision: JsonObject | None, keys: Sequence[str] = BRIEF) -> JsonDict:
    """The KEYS of DECISION a report shows, in that order ({} for no decision)."""
    return {k: decision[k] for k in keys if k in decision} if decision else {}


@dataclass
class Outcome:
    """One action's decision on regopy, OPA's when it ran, and the invariants it breaks."""

    decision: JsonDict | None
    rejected: str | None = None
    divergence: str | None = None
    violations: list[str] = field(default_factory=list)
    document: JsonObject | None = None
    #: The invariants whose premise this action met (what they are about held for it).
    premises: list[str] = field(default_factory=list)
    crosschecked: bool = False


@dataclass(frozen=True)
class UserInvariants:
    """A deployment's invariants: every ``invariant_*`` rule of one Rego file must be true.
    A ``premise_<name>`` rule beside ``invariant_<name>`` says what it is about, so ``prove``
    counts the actions that met it (and says VACUOUS when none did)."""

    path: str
    package: str
    rules: tuple[str, ...]
    source: str
    premised: tuple[str, ...] = ()

    @classmethod
    def load(cls, path: str | Path) -> UserInvariants:
        try:
            source = Path(path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise AnalysisError(f"{path}: cannot read the invariants: {exc}") from None
        package = _PACKAGE.search(source)
        rules = tuple(sorted(set(_RULE.findall(source))))
        if package is None:
            raise AnalysisError(f"{path}: no package line")
        if not rules:
            raise AnalysisError(f"{path}: no invariant_* rule (each invariant is a rule named invariant_<name>)")
        premised = tuple(rule for rule in rules if rule.removeprefix("invariant_") in set(_PREMISE.findall(source)))
        return cls(str(path), package.group(1), rules, source, premised)


def _runner(users: Sequence[UserInvariants]) -> str:
    lines = ["package kcp.analysis.run", "", "import rego.v1", ""]
    for rule in ("violations", "premises"):  # the built-ins', each named contract.<name>
        lines += [
            f"{rule} contains name if {{",
            f"\tsome found in data.kcp.analysis.builtin.{rule}",
            '\tname := concat("", ["contract.", found])',
            "}",
            "",
        ]
    lines += [
        "inapplicable[name] := why if {",
        "\tsome found, why in data.kcp.analysis.builtin.inapplicable",
        '\tname := concat("", ["contract.", found])',
        "}",
        "",
    ]
    for user in users:
        for rule in user.rules:
            name = f"{user.package}.{rule}"
            lines += [f'violations contains "{name}" if not data.{user.package}.{rule} == true', ""]
        for rule in user.premised:
            premise = "premise_" + rule.removeprefix("invariant_")
            lines += [f'premises contains "{user.package}.{rule}" if data.{user.package}.{premise} == true', ""]
    lines.append('report := {"violations": sort(violations), "premises": sort(premises), "inapplicable": inapplicable}')
    return "\n".join(lines) + "\n"


class Evaluator:
    """One bundle on regopy (and OPA when installed) plus its invariants engine."""

    def __init__(
        self, bundle: LoadedBundle, users: Sequence[UserInvariants] = (), *, opa: bool = True, checks: bool = True
    ) -> None:
        self.bundle = bundle
        self.decisions = 0
        self.last_violations: list[str] = []
        #: {invariant: why} for the invariants the bundle gives nothing to test (from the Rego).
        self.inapplicable: dict[str, str] = {}
        self._variants: dict[str, Evaluator] = {}
        self.engine = RegopyEngine(bundle, preflight=checks)
        self.reference: OpaReference | None = None
        if not checks:  # a variant of a bundle already checked: decisions only
            return
        if opa and opa_installed():
            self.reference = OpaReference(bundle)
        builtin = resources.files("kcp_opa.analysis").joinpath("rego/builtin.rego").read_text(encoding="utf-8")
        modules = {"kcp/analysis/builtin.rego": builtin, "kcp/analysis/run.rego": _runner(users)}
        modules |= {f"invariants/{i}/{Path(u.path).name}": u.source for i, u in enumerate(users)}
        manifest = {"revision": "analysis", "metadata": {"kcp_opa": {"entrypoints": [INVARIANTS_ENTRYPOINT]}}}
        rules = LoadedBundle(f"{bundle.source} (invariants)", manifest, bundle.data, modules, bundle.sha256)
        try:
            self.invariants = RegopyEngine(rules, INVARIANTS_ENTRYPOINT, preflight=False)
        except Exception as exc:
            raise AnalysisError(f"the invariants do not load: {exc}") from None

    def decide_restricted(self, restriction: str, action: JsonObject, now: str) -> Outcome:
        """ACTION decided by this bundle with RESTRICTION added to every unit (regopy; counted
        in this evaluator's decisions): the stronger declaration monotonicity compares with."""
        variant = self._variants.get(restriction)
        if variant is None:
            variant = Evaluator(_with_restriction(self.bundle, restriction), opa=False, checks=False)
            self._variants[restriction] = variant
        self.decisions += 1
        return variant.decide(action, now)

    @property
    def engines(self) -> tuple[str, ...]:
        return ("regopy", "opa") if self.reference is not None else ("regopy",)

    def decide(self, action: JsonObject, now: str, controls: Sequence[str] = ()) -> Outcome:
        """Decide ACTION at NOW (controls counted satisfied beside the system's); no invariants."""
        try:
            # The host vouches for what a generated action states (as a decision case with
            # `context: {from_action: true}`): each stated fact reaches the policy through the
            # same sources a deployment uses, and a fact the action omits is absent.
            sources, principal = case_sources(action, HOST_VOUCHED, now)
            prepared = build_input(
                action,
                now=now,
                satisfied_controls=(*SYSTEM_CONTROLS, *controls),
                bundle_revision=self.bundle.revision,
                context=sources,
                principal=principal,
            )
        except ActionRejectedError as exc:
            return Outcome(None, rejected=str(exc))
        self.decisions += 1
        result = self.engine.evaluate(prepared.document)
        value: JsonDict = dict(result.value) if result.value is not None else {"engine_error": result.error}
        outcome = Outcome(value, document=prepared.document)
        if self.reference is not None:
            other = self.reference.evaluate(prepared.document)
            outcome.crosschecked = True
            if (result.error is None) != (other.error is None):
                outcome.divergence = "/"
            elif result.error is None:
                outcome.divergence = first_difference(result.value, other.value)
        return outcome

    def check(self, outcome: Outcome, facts: JsonObject, before: Outcome | None = None, change: str = "") -> list[str]:
        """The invariants OUTCOME breaks (and engine disagreement, which is a comparison)."""
        if outcome.decision is None or outcome.document is None:
            return []
        doc: JsonDict = {"input": outcome.document, "decision": outcome.decision, "facts": dict(facts)}
        if before is not None and before.decision is not None:
            doc |= {"before": before.decision, "change": change}
        result = self.invariants.evaluate(doc)
        if result.value is None:
            raise AnalysisError(f"the invariants failed to evaluate: {result.error}")
        found = [str(v) for v in items(result.value.get("violations"))]
        premises = [str(p) for p in items(result.value.get("premises"))]
        self.inapplicable = {str(k): str(v) for k, v in mapping(result.value.get("inapplicable")).items()}
        if outcome.crosschecked:
            premises.append(ENGINES_AGREE)
        if outcome.divergence is not None:
            found.append(ENGINES_AGREE)
        outcome.violations = sorted(set(found))
        outcome.premises = sorted(set(premises))
        self.last_violations = outcome.violations
        return outcome.violations


def _with_restriction(bundle: LoadedBundle, restriction: str) -> LoadedBundle:
    data = copy.deepcopy(bundle.data)
    for profile in items(mapping(data.get("kcp_data")).get("profiles")):
        compliance = profile.get("compliance") if isinstance(profile, dict) else None
        if isinstance(compliance, dict):
            compliance["restrictions"] = sorted({*strings(compliance.get("restrictions")), restriction})
    return LoadedBundle(f"{bundle.source} (+{restriction})", bundle.manifest, data, bundle.modules, bundle.sha256)
