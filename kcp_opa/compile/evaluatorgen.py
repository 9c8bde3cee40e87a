"""The gate's findings union, generated from the evaluators' METADATA.

Every non-test module under ``<policies>/kcp/evaluators/`` is an evaluator: its package
METADATA names it (``custom.evaluator_id``, ``custom.evaluator_version``) and its ``findings``
set joins the gate. A finding names no evaluator: the generated table ``evaluators`` (from the
METADATA, the one place) gives each reason its id and version, so a finding cannot disagree
with its package. An evaluator may also export ``obligations`` (what the caller must do even on
allow) and ``risk_floor`` (risk levels it raises); the gate reads those only through the union
as well. The union is written out as static Rego (``kcp/gate/evaluators.rego``):
a dynamic ``data.kcp.evaluators[name].findings`` lookup was measured 3.4x slower on regopy, and
a static file is what OPA and a reviewer read. ``kcp-opa generate`` writes it; ``kcp-opa check``
and ``kcp-opa compile`` fail while it is stale, so adding an evaluator never means hand-editing
the gate, and an evaluator left out of it (its DENYs dropped) never ships.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from kcp_opa.compile.bundle import write_atomically
from kcp_opa.compile.policyfiles import PolicyModule, collect_policies
from kcp_opa.core.errors import CompileError
from kcp_opa.declare.waivers import TERMINAL_CODES, declared, refusals

GENERATED = "kcp/gate/evaluators.rego"
EVALUATORS_DIR = "kcp/evaluators"
_PREFIX = "kcp.evaluators."
#: Optional exports an evaluator may define beside ``findings``: the gate's name for their union.
EXPORTS = {"obligations": "evaluator_obligations", "risk_floor": "evaluator_risk_floor"}


@dataclass(frozen=True)
class Evaluator:
    name: str  # the package's last segment: data.kcp.evaluators.<name>
    evaluator_id: str
    version: str
    path: str
    exports: tuple[str, ...] = ()  # which of EXPORTS the module defines
    planned: bool = False  # defines applies(profile, task): reached only where the decision plan names it


def evaluators(policies: Path) -> list[Evaluator]:
    """The evaluator packages under ``policies``, by package name; one without its METADATA is an
    error (left out silently, its DENYs would never reach the gate: a fail-open)."""
    found: dict[str, Evaluator] = {}
    for module in collect_policies(policies):
        if not module.path.startswith(f"{EVALUATORS_DIR}/"):
            continue
        name = _evaluator_name(module)
        if not module.evaluators:
            raise CompileError(
                f"{module.path}: an evaluator module needs package METADATA "
                "custom.evaluator_id and custom.evaluator_version (docs/extending.md)"
            )
        if name in found:
            raise CompileError(f"{module.path}: package {module.package} is also declared in {found[name].path}")
        ev_id, version = sorted(module.evaluators.items())[0]
        exports = tuple(e for e in EXPORTS if re.search(rf"^(?:default\s+)?{e}\b", module.source, re.MULTILINE))
        planned = _APPLIES.search(module.source) is not None
        if planned and "input" in _applies_text(module.source):
            raise CompileError(
                f"{module.path}: applies(profile, task) is evaluated at compile time and must not read input "
                "(docs/extending.md)"
            )
        found[name] = Evaluator(name, ev_id, version, module.path, exports, planned)
    if not found:
        raise CompileError(f"{policies}: no evaluator modules under kcp/evaluators/")
    return [found[name] for name in sorted(found)]


_APPLIES = re.compile(r"^applies\(", re.MULTILINE)


def _applies_text(source: str) -> str:
    """The text of every top-level ``applies(...)`` rule (its head and body)."""
    lines = source.splitlines()
    taken: list[str] = []
    inside = False
    for line in lines:
        if line.startswith("applies("):
            inside = True
        elif line and not line[0].isspace() and line[0] != "}":
            inside = False
        if inside:
            taken.append(line.split("#", 1)[0])
    return "\n".join(taken)


def _evaluator_name(module: PolicyModule) -> str:
    rest = module.package.removeprefix(_PREFIX)
    if not module.package.startswith(_PREFIX) or "." in rest:
        raise CompileError(f"{module.path}: an evaluator's package must be {_PREFIX}<name>, not {module.package}")
    return rest


def _union(terms: list[str]) -> str:
    """``a | b | c`` left-nested, as `opa fmt` writes it; ``set()`` for none."""
    if not terms:
        return "set()"
    union = terms[0]
    for index, term in enumerate(terms[1:]):
        union = f"{'(' + union + ')' if index else union} | {term}"
    return union


def _rego_names(names: list[str]) -> str:
    """A few evaluator names as a one-line Rego set, sorted."""
    return "{" + ", ".join(f'"{n}"' for n in sorted(names)) + "}" if names else "set()"


def _rego_set(codes: set[str] | frozenset[str], brackets: str = "{}") -> str:
    """One string a line, sorted, as `opa fmt` writes a long set (or, with ``brackets="[]"``, an
    array): the module stays within 120 columns."""
    if not codes:
        return "set()" if brackets == "{}" else "[]"
    return brackets[0] + "\n" + "".join(f'\t"{c}",\n' for c in sorted(codes)) + brackets[1]


def render_union(policies: Path) -> str:
    """The generated module's text: deterministic, one import, one table row and one union term
    per evaluator, and the codes the evaluators' METADATA declares waivable (never a terminal one)."""
    found = evaluators(policies)
    modules = {m.path: m.source for m in collect_policies(policies) if m.path.startswith(f"{EVALUATORS_DIR}/")}
    refused = refusals(modules)
    if refused:
        where, why = refused[0]
        raise CompileError(f"{where.file}:{where.line}: {why}")
    waivable = {w.code for w in declared(modules)}
    listing = "\n".join(f"#   {e.name}: {e.evaluator_id} {e.version} ({e.path})" for e in found)
    imports = "\n".join(f"import data.kcp.evaluators.{e.name} as ev_{e.name}" for e in found if e.planned)
    table = "\n".join(
        f'\t"{e.name}": {{"evaluator_id": "{e.evaluator_id}", "evaluator_version": "{e.version}"}},' for e in found
    )
    table += '\n\t"exceptions": {"evaluator_id": "exception_check", "evaluator_version": "1.0.0"},'

    exports = ""
    for export, rule in EXPORTS.items():
        names = _rego_names([e.name for e in found if export in e.exports])
        exports += (
            f"\n# METADATA\n# title: The planned evaluators' {export}, united\n"
            f"{rule} := {{x |\n\tsome name in planned\n\tname in {names}\n"
            f"\tsome x in data.kcp.evaluators[name].{export}\n}}\n"
        )
    always = _rego_names([e.name for e in found if not e.planned])
    plannable = [e.name for e in found if e.planned]
    applies = "\n".join(f'_applies("{n}", profile, task) if ev_{n}.applies(profile, task)\n' for n in plannable)
    return (
        "# GENERATED by `kcp-opa generate` from the METADATA of kcp/evaluators/*.rego: do not edit.\n"
        "# Add an evaluator as docs/extending.md says, then run `kcp-opa generate`; `kcp-opa check`\n"
        "# fails while this file is stale. Evaluators:\n"
        f"{listing}\n"
        "package kcp.gate\n\n"
        "import rego.v1\n\n"
        f"{imports}\n"
        "import data.kcp.gate.exceptions\n"
        "import data.kcp.lib.facts\n\n"
        "# METADATA\n"
        "# title: Every evaluator's id and version, from its package METADATA\n"
        "# description: A finding names no evaluator; its reason takes the id and version from here.\n"
        f"evaluators := {{\n{table}\n}}\n\n"
        "# METADATA\n"
        "# title: Evaluators every decision reaches (their modules define no applies)\n"
        f"always_planned := {always}\n\n"
        "# METADATA\n"
        "# title: The evaluators this decision reaches\n"
        "# description: |\n"
        "#   The decision plan's row (data.kcp_data.plan, compiled from the evaluators' applies) for the\n"
        "#   unit's profile, or for an action on no known unit; its entry for the action type, else its\n"
        "#   `other`. Without a plan in the data, every evaluator. The plan can only add to always_planned.\n"
        "planned := always_planned | {name | some name in _plan_names}\n\n"
        "_plan_row := data.kcp_data.plan.profiles[facts.unit.profile] if {\n"
        "\tfacts.unit_known\n"
        "} else := data.kcp_data.plan.unbound\n\n"
        "_plan_names := names if {\n"
        "\tnames := _plan_row.types[input.action.action_type]\n"
        "} else := names if {\n"
        "\tnames := _plan_row.other\n"
        "} else := _plannable # no plan: every evaluator (always_planned is united in)\n\n"
        "# METADATA\n"
        "# title: The planned evaluators' findings, by evaluator, before exceptions\n"
        "evaluated_by_evaluator[name] := data.kcp.evaluators[name].findings if {\n"
        "\tsome name in planned\n"
        "}\n\n"
        "# METADATA\n"
        "# title: Every evaluator's findings, by evaluator, exceptions applied (kcp.gate.exceptions)\n"
        "findings_by_evaluator := exceptions.apply(evaluated_by_evaluator, waivable, terminal)\n\n"
        "# METADATA\n"
        "# title: Codes an exception may waive (custom.waivable of the findings rules)\n"
        f"waivable := {_rego_set(waivable)}\n\n"
        "# METADATA\n"
        "# title: Terminal denials, never waivable (kcp_opa.declare.waivers)\n"
        f"terminal := {_rego_set(TERMINAL_CODES)}\n\n"
        "# METADATA\n"
        "# title: Every finding of every evaluator, with its evaluator's id and version\n"
        "# description: For tools and tests; the decision reads findings_by_evaluator.\n"
        "findings contains finding if {\n"
        "\tsome name, found in findings_by_evaluator\n"
        "\tsome f in found\n"
        "\tfinding := object.union(f, evaluators[name])\n"
        "}\n"
        f"{exports}\n"
        "# METADATA\n"
        "# title: The decision plan, computed by `kcp-opa compile` (never at decision time)\n"
        "# description: |\n"
        "#   For each unit profile, and for actions on no known unit (`unbound`): the evaluators whose\n"
        "#   applies holds, for each action type in input.task_types (in order) and for input.other,\n"
        "#   an action type no declaration names. kcp_opa.compile.decisionplan stores it in the bundle.\n"
        "plan_table := {\n"
        '\t"profiles": [_plan_of(profile) | some profile in data.kcp_data.profiles],\n'
        '\t"unbound": _plan_of(null),\n'
        "}\n\n"
        "_plan_of(profile) := {\n"
        '\t"types": [_applicable(profile, task) | some task in input.task_types],\n'
        '\t"other": _applicable(profile, input.other),\n'
        "}\n\n"
        "_applicable(profile, task) := [name |\n\tsome name in _plannable\n\t_applies(name, profile, task)\n]\n\n"
        f"_plannable := {_rego_set(set(plannable), brackets='[]')}\n\n"
        f"{applies}"
    )


def stale(policies: Path) -> str | None:
    """Why ``kcp/gate/evaluators.rego`` does not match the evaluators, or None when it does."""
    target = policies / GENERATED
    wanted = render_union(policies)
    try:
        current = target.read_text(encoding="utf-8")
    except FileNotFoundError:
        return f"{GENERATED} is missing: run `kcp-opa generate`"
    if current != wanted:
        return f"{GENERATED} does not match the evaluators under kcp/evaluators/: run `kcp-opa generate`"
    return None


def write_union(policies: Path) -> bool:
    """Write the generated module; True when it changed."""
    target = policies / GENERATED
    wanted = render_union(policies)
    if target.is_file() and target.read_text(encoding="utf-8") == wanted:
        return False
    write_atomically(target, wanted.encode("utf-8"))
    return True
