"""``docs/reference.md``, generated from the policies and the schemas.

Every routing state (``kcp/lib/routing.rego``), every reason code with the rule, state, controls,
evaluator and input paths it reads (the finding literals of ``kcp/evaluators/*.rego`` and their
METADATA ``custom.requires`` / ``custom.absent``), the action types and attribute flags the
evaluators recognise, the controls (``kcp/controls/evidence.rego``) and the action intent's
fields (its JSON schema). Generated, so the reference cannot drift from the policy:
``tests/compile/test_reference_doc.py`` fails while the committed file differs.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from kcp_opa.compile.evaluatorgen import EVALUATORS_DIR, evaluators
from kcp_opa.core.jsonread import items, mapping
from kcp_opa.declare.waivers import metadata_blocks

_FINDINGS = re.compile(r"^findings contains finding if \{\s*$")
_STATES = re.compile(r'"([A-Z_]+)": \{"rank": (\d+), "outcome": "(\w+)", "hold": (true|false)\}')
_ACTORS = re.compile(r'^\t"(\w+)": \{([^}]*)\},?$', re.MULTILINE)
_LITERALS = re.compile(r'"([a-z_]+)"')


@dataclass
class Rule:
    code: str
    rule: str
    state: str
    controls: str
    evaluator: str
    requires: list[str]
    absent: str
    where: str


@dataclass
class Recognised:
    names: dict[str, set[str]] = field(default_factory=dict)

    def add(self, name: str, where: str) -> None:
        self.names.setdefault(name, set()).add(where)


def _field(block: str, key: str) -> str | None:
    match = re.search(rf'^\t\t"{key}": (.+?),?$', block, re.MULTILINE)
    return match.group(1) if match else None


def _codes(block: str, source: str) -> list[tuple[str, str, str]]:
    """(code, state, controls) for one findings rule; a code built from a lookup table, as the
    matrix's ``concat("_", ["matrix", level])`` over ``_route``, gives one row per table entry."""
    code = _field(block, "code") or "?"
    state = _field(block, "state") or "?"
    controls = _field(block, "controls") or "[]"
    if code.startswith('"'):
        return [(code.strip('"'), _state(state, source), controls)]
    built = re.search(rf'{code} := concat\("(.)", \["(\w+)", (\w+)\]\)', block)
    table = re.search(r"^(_\w+) := \{\n(.*?)^\}", source, re.MULTILINE | re.DOTALL)
    if built is None or table is None:
        return [(f"(computed: {code})", state, controls)]
    rows = []
    for key, value in re.findall(r'^\t"(\w+)": (\{.*\}),$', table.group(2), re.MULTILINE):
        entry = json.loads(value)
        rows.append((f"{built.group(2)}{built.group(1)}{key}", f"`{entry['state']}`", json.dumps(entry["controls"])))
    return rows


def _state(state: str, source: str) -> str:
    """A literal state, or a lookup (``_state[_policy.on_stale]``) spelled out from its table."""
    if state.startswith('"'):
        return f"`{state.strip(chr(34))}`"
    lookup = re.fullmatch(r"(_\w+)\[(.+)\]", state)
    table = re.search(rf"^{lookup.group(1)} := (\{{.*\}})$", source, re.MULTILINE) if lookup else None
    if lookup is None or table is None:
        return f"computed: `{state}`"
    entries = ", ".join(f"{k}: `{v}`" for k, v in json.loads(table.group(1)).items())
    return f"by `{lookup.group(2)}`: {entries}"


def _scan(policies: Path) -> tuple[list[Rule], Recognised, Recognised]:
    rules: list[Rule] = []
    actions, flags = Recognised(), Recognised()
    for ev in evaluators(policies):
        source = (policies / ev.path).read_text(encoding="utf-8")
        lines = source.splitlines()
        above = {end: parsed for _, parsed, end in metadata_blocks(source)}  # a rule's METADATA, by its line
        for index, line in enumerate(lines):
            if not _FINDINGS.match(line):
                continue
            end = next(i for i in range(index + 1, len(lines)) if lines[i] == "}")
            block = "\n".join(lines[index : end + 1])
            meta = mapping(mapping(above.get(index)).get("custom"))
            rule = (_field(block, "rule") or "?").strip('"')
            where = f"{ev.path}:{index + 1}"
            for code, state, controls in _codes(block, source):
                requires = [str(r) for r in items(meta.get("requires"))]
                rules.append(
                    Rule(code, rule, state, controls, ev.evaluator_id, requires, str(meta.get("absent", "")), where)
                )
        _recognised(ev.path, ev.evaluator_id, lines, actions, flags)
    facts = policies / "kcp" / "lib" / "facts.rego"  # the money-moving types every evaluator shares
    if facts.is_file():
        _recognised(
            "kcp/lib/facts.rego", "kcp.lib.facts", facts.read_text(encoding="utf-8").splitlines(), actions, flags
        )
    return rules, actions, flags


def _recognised(path: str, evaluator_id: str, lines: list[str], actions: Recognised, flags: Recognised) -> None:
    for index, line in enumerate(lines):
        where = f"{evaluator_id} ({path}:{index + 1})"
        if "action_type ==" in line or line.startswith(("_money_moving := {", "money_moving := {")):
            for name in _LITERALS.findall(line.split("action_type", 1)[-1] if "==" in line else line):
                actions.add(name, where)
        for name in re.findall(r'"([a-z_]+)" in _raised', line):
            flags.add(name, where)
        if line.strip().startswith("name in {") and index and "_raised" in lines[index - 1]:
            for name in _LITERALS.findall(line):
                flags.add(name, where)


def _cell(text: str) -> str:
    return text.replace("|", "\\|") if text else ""


def render_reference(policies: Path) -> str:
    """The reference's markdown, deterministic for the same policies and schemas."""
    routing = (policies / "kcp" / "lib" / "routing.rego").read_text(encoding="utf-8")
    evidence = (policies / "kcp" / "controls" / "evidence.rego").read_text(encoding="utf-8")
    rules, actions, flags = _scan(policies)
    out = [
        "# Reference",
        "",
        "<!-- GENERATED by `kcp-opa generate --reference docs/reference.md` (`make docs`) from",
        f"     policies/{EVALUATORS_DIR}/*.rego, kcp/lib/routing.rego, kcp/controls/evidence.rego and",
        "     kcp_opa/schemas/action-intent.schema.json. Do not edit: tests/compile/test_reference_doc.py fails",
        "     while this file is stale. -->",
        "",
        "What the gate recognises, read from the policies themselves. The decision document and the",
        "controls are explained in docs/contract.md; missing facts in docs/fail-closed.md; adding an",
        "evaluator in docs/extending.md.",
        "",
        "## Routing states",
        "",
        "Strongest first; a decision takes the strongest state any finding asks for (ALLOW when none).",
        "A hold is a state no control clears (the action cannot be executed).",
        "",
        "| state | strength rank | outcome | hold |",
        "|---|---|---|---|",
    ]
    for state, rank, outcome, hold in sorted(_STATES.findall(routing), key=lambda s: int(s[1])):
        out.append(f"| `{state}` | {rank} | `{outcome}` | {'yes' if hold == 'true' else 'no'} |")
    out += [
        "",
        "## Reason codes",
        "",
        "One row per findings rule: the code in `reasons[].code`, the rule id in `reasons[].rule`,",
        "the routing state it asks for, the controls it adds, the evaluator (`reasons[].evaluator_id`),",
        "the input paths it reads (`custom.requires`; a missing one is `context_missing` unless the",
        "rule says what its absence means) and where it is defined. The gate adds `policy_passed`",
        "(no rule matched) and `policy_undefined` (the fail-closed default); the Python layer adds",
        "`engine_error` and `engine_divergence` (docs/fail-closed.md).",
        "",
        "| code | rule | state | controls | evaluator | reads | when absent | defined at |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in sorted(rules, key=lambda r: (r.code, r.where)):
        reads = ", ".join(f"`{p}`" for p in r.requires) or "(nothing)"
        controls = ", ".join(f"`{c}`" for c in json.loads(r.controls)) if r.controls.startswith("[") else r.controls
        out.append(
            f"| `{r.code}` | `{r.rule}` | {r.state} | {controls or '(none)'} | `{r.evaluator}` | {reads} "
            f"| {_cell(r.absent)} | `{r.where}` |"
        )
    out += ["", "## Action types", "", "`action_type` values a rule treats specially (any other value is"]
    out += ["decided by the matrix and the unit's rules alone).", "", "| action type | read by |", "|---|---|"]
    for name in sorted(actions.names):
        out.append(f"| `{name}` | {'; '.join(sorted(actions.names[name]))} |")
    out += ["", "## Attribute flags", "", "`attributes.<flag>: true` on the action raises these (other"]
    out += ["flags are ignored; a flag that is not `true` is not raised).", "", "| flag | read by |", "|---|---|"]
    for name in sorted(flags.names):
        out.append(f"| `{name}` | {'; '.join(sorted(flags.names[name]))} |")
    out += ["", "## Controls", "", "Who may satisfy each control (`kcp-opa controls record`): `user` is the"]
    out += ["action's own subject, `human` any other registered person.", "", "| control | actor kinds |", "|---|---|"]
    for name, kinds in _ACTORS.findall(evidence.split("allowed_actors := {", 1)[1].split("\n}", 1)[0]):
        out.append(f"| `{name}` | {', '.join(sorted(_LITERALS.findall(kinds)))} |")
    out += _schema_section()
    return "\n".join(out) + "\n"


def _schema_section() -> list[str]:
    schema = json.loads(resources.files("kcp_opa.schemas").joinpath("action-intent.schema.json").read_text("utf-8"))
    required = set(schema.get("required", []))
    out = ["", "## Action intent fields", "", "From `kcp_opa/schemas/action-intent.schema.json`."]
    out += ["", "| field | type | required | sub-fields |", "|---|---|---|---|"]
    for name, spec in schema["properties"].items():
        kind = spec.get("type") or (f"`{json.dumps(spec['const'])}`" if "const" in spec else "string")
        subs = ", ".join(f"`{s}`" for s in spec.get("properties", {}))
        out.append(f"| `{name}` | {kind} | {'yes' if name in required else 'no'} | {subs} |")
    return out


def reference_stale(policies: Path, target: Path) -> str | None:
    """Why ``target`` differs from what the policies generate, or None."""
    try:
        current = target.read_text(encoding="utf-8")
    except FileNotFoundError:
        return f"{target} is missing: run `make docs`"
    return None if current == render_reference(policies) else f"{target} is stale: run `make docs`"
