"""`kcp-opa check`: compile every module on both engines and flag the constructs that bite.

Errors: a module OPA (1.x) or regopy cannot compile, or one that aborts regopy's planner.
Warnings, each with file and line: v0 syntax (regopy accepts it, OPA 1.x does not),
builtins regopy lacks or leaves silently undefined, builtins that break replay, packages that
data would shadow, `with input as` in tests (the regopy abort), helper functions defined
under the same name in two packages (a regopy segfault seen here), engine-divergent
constructs (docs/engine-findings.md items 23-26, 34 and 35), each with the rewrite that does not diverge,
and lines over MAX_LINE characters (tests too: a reviewer reads every line of a diff).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from kcp_opa.authoring.findingcheck import CheckFinding, finding_problems
from kcp_opa.authoring.regochild import regopy_files
from kcp_opa.authoring.regosyntax import OPA_ONLY, syntax_problems
from kcp_opa.compile.resolution import policy_problems
from kcp_opa.core.jsonread import JsonObject, mapping
from kcp_opa.decide.engine import forbidden_builtin_calls, shadowed_packages
from kcp_opa.declare.waivers import refusals as waiver_refusals

CHECK_TIMEOUT_S = 120
#: The longest line a policy module (or its test) may have, in characters (a tab counts one).
MAX_LINE = 120

#: Builtins regopy 1.5.2 leaves undefined without an error (docs/engine-findings.md hazard 5).
SILENT_IN_REGOPY = (
    "http.send",
    "json.match_schema",
    "json.verify_schema",
    "rego.metadata.rule",
    "rego.metadata.chain",
    "strings.render_template",
)
_PACKAGE = re.compile(r"^package\s+([\w.]+)", re.MULTILINE)
_IMPORT = re.compile(r"^import\s+(?:data|input)\.([\w.]+)(?:\s+as\s+(\w+))?", re.MULTILINE)
_CALL = re.compile(r"(?<![\w.])([a-z_]\w*(?:\.[a-z_]\w*)+)\s*\(")
_RULE_NAME = re.compile(r"^(?:default\s+)?([a-z_]\w*)", re.MULTILINE)
_V0_RULE = re.compile(r"^[a-z_]\w*(\[[^\]]*\])?\s*\{\s*$")
_HELPER_FUNCTION = re.compile(r"^(_\w+)\(", re.MULTILINE)
_OBJECT_HEAD_SET_RULE = re.compile(r"^[a-z_]\w*\s+contains\s+\{")
_FUNCTION_HEAD = re.compile(r"^([a-z_][\w.]*)\(([^)]*)\)")
_KEYWORDS = {"package", "import", "default", "not", "some", "every", "with", "else"}

#: A line may say why its sort is engine-independent: ``# kcp-opa: sorted identifiers``.
SORTED_IDENTIFIERS = "kcp-opa: sorted identifiers"
#: A line may say why its min or max orders alike on both engines: ``# kcp-opa: ordered alike (why)``.
ORDERED_ALIKE = "kcp-opa: ordered alike"
_STRING_LITERAL = re.compile(r'"(?:[^"\\]|\\.)*"')

#: Constructs whose result differs between regopy and OPA, and the rewrite that does not.
DIVERGENT_CALLS = {
    "lower": 'regopy\'s lower() is ASCII-only (lower("TRAİNING") keeps the İ; engine-findings item 26): compare '
    "input.context.folded.<name>, folded in Python (kcp_opa.decide.action.FOLDED_PATHS), or look a closed "
    'vocabulary up in an object ({"low": "LOW", ...}[x])',
    "upper": "regopy's upper() is ASCII-only (engine-findings item 26): look a closed vocabulary up in an object "
    '({"low": "LOW", ...}[x]) or fold in Python into input.context.folded',
    "json.marshal": "regopy does not escape strings inside json.marshal's result (engine-findings item 23): "
    "build the value as an object and let the caller serialise it",
    "sprintf": "regopy embeds a computed string quoted and unescaped in sprintf output (engine-findings items 13, "
    "19): build strings with concat (numbers via format_int)",
}


def _line_of(source: str, offset: int) -> int:
    return source.count("\n", 0, offset) + 1


def check_modules(modules: Mapping[str, str], *, data: JsonObject | None = None) -> list[CheckFinding]:
    findings: list[CheckFinding] = []
    broken = syntax_problems(modules)
    for problem in broken:  # a parse error is named as one, never as a regopy abort
        column = f"column {problem.column}, " if problem.column else ""
        message = f"{problem.message} ({column}{problem.engine} parser)"
        findings.append(CheckFinding(problem.file, problem.line, "error", "syntax_error", message))
    findings += _opa_compile(modules)
    if not broken:  # regopy's child dies on a parse error: that is no planning abort
        findings += _regopy_compile(modules)
    findings += _lint(modules, data or {})
    findings += [  # a terminal denial marked waivable: no exception may ever lift it
        CheckFinding(w.file, w.line, "error", "terminal_waivable", why) for w, why in waiver_refusals(modules)
    ]
    trust = mapping(mapping(data).get("kcp_data")).get("trust")  # a bundle compiled --trust: its registry
    unresolved = policy_problems(modules, trust if isinstance(trust, Mapping) else None)
    findings += [CheckFinding(u.file, u.line or 1, "error", u.code, u.message) for u in unresolved]
    findings += finding_problems(modules)
    findings += long_lines(modules)
    return sorted(findings, key=lambda f: (f.file, f.line, f.code))


def long_lines(modules: Mapping[str, str]) -> list[CheckFinding]:
    """Every line over MAX_LINE characters, comments included (a warning: it fails --strict)."""
    return [
        CheckFinding(
            name, number, "warning", "line_too_long",
            f"{len(line)} characters, over {MAX_LINE}: continue a `with` chain on the next line, "
            "bind a sub-expression to a local, split a long string with concat() or move long data to a rule",
        )
        for name, source in sorted(modules.items())
        for number, line in enumerate(source.splitlines(), start=1)
        if len(line) > MAX_LINE
    ]  # fmt: skip


def _opa_compile(modules: Mapping[str, str]) -> list[CheckFinding]:
    try:
        from opa_bindings import OpaEngine
    except ImportError:
        return [
            CheckFinding(
                "", 0, "warning", "opa_missing", "the OPA reference engine is not installed; OPA compile skipped"
            )
        ]
    findings = []
    for name, source in sorted(modules.items()):
        engine = OpaEngine()
        try:
            engine.add_policy(name, source)
        except Exception as exc:
            text = " ".join(str(exc).split())
            match = re.search(re.escape(name) + r":(\d+)", text)
            findings.append(CheckFinding(name, int(match.group(1)) if match else 1, "error", "opa_compile", text[:400]))
        finally:
            engine.close()
    return findings


def _regopy_compile(all_modules: Mapping[str, str]) -> list[CheckFinding]:
    """Plan on regopy what the bundle ships, then each test file with it, as ``kcp-opa test`` runs
    them: one file at a time, each with its own time limit (planning every test file at once costs
    minutes, and under load ran past any one limit). A file that kills the child is named."""
    # Files marked `# kcp-opa: engines=opa` say why regopy cannot run them; they are not planned.
    modules = {name: source for name, source in all_modules.items() if not source.startswith(OPA_ONLY)}
    policy = {name: source for name, source in modules.items() if not name.endswith("_test.rego")}
    shipped = sorted({e for source in policy.values() for e in _rule_entrypoints(source)})
    files: list[tuple[str, str, list[str]]] = []
    if shipped:  # the policy's own rules, planned beside an empty module
        files.append((_SHIPPED, "package kcp_opa_check.shipped\n", shipped))
    for name in sorted(set(modules) - set(policy)):
        entrypoints = _rule_entrypoints(modules[name])
        if entrypoints:
            files.append((name, modules[name], entrypoints))
    if not files:
        return []
    findings: list[CheckFinding] = []
    for name, out in sorted(regopy_files(policy, files, timeout_s=CHECK_TIMEOUT_S).items()):
        target = "(bundle)" if name == _SHIPPED else name
        if out is None:
            findings.append(
                CheckFinding(
                    target, 1, "error", "regopy_abort",
                    "regopy aborts planning this module; the known trigger is `x in coll` under `with input as` / "
                    "`with input.<coll> as` (docs/engine-findings.md hazard 4)",
                )
            )  # fmt: skip
        elif "__timeout__" in out:
            findings.append(
                CheckFinding(
                    target, 1, "error", "regopy_timeout",
                    f"regopy did not finish planning this module in {CHECK_TIMEOUT_S} s (engine-findings item 12)",
                )
            )  # fmt: skip
        elif "__build_error__" in out:
            findings.append(CheckFinding(target, 1, "error", "regopy_compile", str(out["__build_error__"])[:400]))
    return findings


_SHIPPED = "(the shipped policies)"


def _rule_entrypoints(source: str) -> list[str]:
    """The rules (not functions) a module defines, as regopy entrypoints."""
    package = _PACKAGE.search(source)
    if package is None:
        return []
    prefix = package.group(1).replace(".", "/")
    names = {
        m.group(1)
        for m in _RULE_NAME.finditer(source)
        if m.group(1) not in _KEYWORDS and "(" not in source[m.end() : m.end() + 1]
    }
    return sorted(f"{prefix}/{name}" for name in names)


def _lint(modules: Mapping[str, str], data: JsonObject) -> list[CheckFinding]:
    from regopy import Interpreter

    probe = Interpreter()
    findings: list[CheckFinding] = []
    helpers: dict[str, list[tuple[str, int, str]]] = {}
    sets = frozenset(set_rules({n: s for n, s in modules.items() if not n.endswith("_test.rego")}))
    for name, source in sorted(modules.items()):
        aliases = {m.group(2) or m.group(1).split(".")[-1] for m in _IMPORT.finditer(source)}
        package = _PACKAGE.search(source)
        for number, line in enumerate(source.splitlines(), start=1):
            code = line.split("#", 1)[0]
            if _V0_RULE.match(code):
                findings.append(
                    CheckFinding(name, number, "warning", "v0_syntax", "v0 rule body (no `if`): OPA 1.x rejects it")
                )
            if not name.endswith("_test.rego") and _OBJECT_HEAD_SET_RULE.match(code):
                findings.append(
                    CheckFinding(
                        name,
                        number,
                        "warning",
                        "object_in_rule_head",
                        "regopy builds an object in a rule head even when the body fails (~20 us a rule; "
                        "docs/engine-findings.md item 22): bind it as the body's last statement "
                        "(`findings contains finding if { ...; finding := {...} }`)",
                    )
                )
            if name.endswith("_test.rego") and re.search(r"\bwith\s+input\s+as\b", code):
                findings.append(
                    CheckFinding(
                        name,
                        number,
                        "warning",
                        "with_input_as",
                        "`with input as {...}` aborts regopy when the rule under test uses `x in coll` "
                        "(docs/engine-findings.md hazard 4); mock `input.<field>` instead",
                    )
                )
            findings += _argument_index(name, number, code, source.splitlines())
            if not name.endswith("_test.rego"):
                previous = source.splitlines()[number - 2] if number > 1 else ""
                findings += _divergent(name, number, code, line, previous, sets)
            for match in _CALL.finditer(code):
                called = match.group(1)
                if called.split(".")[0] in aliases:
                    continue
                if called in SILENT_IN_REGOPY or called.startswith("net."):
                    findings.append(
                        CheckFinding(
                            name,
                            number,
                            "warning",
                            "silent_builtin",
                            f"{called} is undefined in regopy without an error (docs/engine-findings.md hazard 5)",
                        )
                    )
                elif not probe.is_builtin(called):
                    findings.append(
                        CheckFinding(name, number, "warning", "missing_builtin", f"regopy has no builtin {called}")
                    )  # fmt: skip
        for item in forbidden_builtin_calls({name: source}):
            _, line_number, builtin = item.rsplit(":", 2)
            findings.append(
                CheckFinding(
                    name, int(line_number), "warning", "nondeterministic_builtin",
                    f"{builtin.strip()} breaks replay (or leaks the environment) in a decision path",
                )
            )  # fmt: skip
        if package is not None:
            for match in _HELPER_FUNCTION.finditer(source):
                helpers.setdefault(match.group(1), []).append((name, _line_of(source, match.start()), package.group(1)))
    for shadowed in shadowed_packages(modules, data):
        findings.append(
            CheckFinding("(data)", 1, "warning", "shadowed_by_data", f"data at data.{shadowed} shadows rules")
        )
    for name, module_source in sorted(modules.items()):
        package = _PACKAGE.search(module_source)
        if package is not None and package.group(1).split(".")[0] == "kcp_data":
            findings.append(
                CheckFinding(
                    name, 1, "warning", "shadowed_by_data", "package under kcp_data, where compiled data lives"
                )
            )
    for helper, places in helpers.items():
        packages = {p for _, _, p in places}
        if len(packages) > 1:
            for file, where, _ in places:
                findings.append(
                    CheckFinding(
                        file, where, "warning", "duplicate_helper",
                        f"helper {helper} is defined in {len(packages)} packages; two same-named helpers once "
                        "segfaulted regopy's planner (docs/engine-findings.md item 10)",
                    )
                )  # fmt: skip
    return findings


_ANY_CALL = re.compile(r"(?<![\w.])(lower|upper|json\.marshal|sprintf|sort|min|max)\s*\(")
#: ``concat(sep, {...})``: a set comprehension or literal joined in the order the engine iterates it.
_CONCAT_SET = re.compile(r"(?<![\w.])concat\s*\(\s*(?:\"[^\"]*\"|`[^`]*`)\s*,\s*\{")
#: ``concat(sep, name)``: joins whatever ``name`` is; a warning when a module defines it as a set.
_CONCAT_NAME = re.compile(r"(?<![\w.])concat\s*\(\s*(?:\"[^\"]*\"|`[^`]*`)\s*,\s*([A-Za-z_][\w.]*)\s*\)")
#: A rule that is a set: ``name contains ...`` or ``name := {x | ...}`` (no ``:`` before the bar).
_SET_RULE = re.compile(r"^([a-z_]\w*)\s+contains\b|^([a-z_]\w*)\s*:=\s*\{[^:|{}]*\|", re.MULTILINE)


def set_rules(modules: Mapping[str, str]) -> set[str]:
    """The names of the rules some module defines as a set (by the two forms of _SET_RULE)."""
    return {a or b for source in modules.values() for a, b in _SET_RULE.findall(source)}


def _divergent(
    name: str, number: int, code: str, line: str, previous: str, sets: frozenset[str] = frozenset()
) -> list[CheckFinding]:
    """Engine-divergent constructs on one policy line (tests may use them on purpose). ``sets``:
    the rules the policies define as sets, whose join follows the engine's iteration order."""
    found: list[CheckFinding] = []
    joined = _CONCAT_NAME.search(_code_only(line))
    if _CONCAT_SET.search(_code_only(line)) or (joined and joined.group(1).rsplit(".", 1)[-1] in sets):
        found.append(
            CheckFinding(
                name, number, "warning", "divergent_order",
                "concat over a set: regopy iterates a set a policy builds in the order it was built, OPA in "
                "sorted order (engine-findings item 35): join a sorted array, concat(sep, sort(s))",
            )
        )  # fmt: skip
    if "\\" in "".join(_STRING_LITERAL.findall(code)):
        found.append(
            CheckFinding(
                name, number, "warning", "escaped_literal",
                "regopy keeps a string literal's escape text (\"a\\\"b\" is 4 characters there; engine-findings "
                "item 2): write the character itself, or move the value to data",
            )
        )  # fmt: skip
    for match in _ANY_CALL.finditer(code):
        called = match.group(1)
        if called in ("min", "max"):
            if ORDERED_ALIKE not in line and ORDERED_ALIKE not in previous:
                found.append(
                    CheckFinding(
                        name, number, "warning", "divergent_order",
                        f"{called}: regopy orders numbers by their text (max([9, 10]) is 9, max([-1, -2]) is -2; "
                        "engine-findings item 34): compare with < or > (numeric on both engines), e.g. "
                        "[x | some x in xs; every y in xs { y <= x }], or, when every value is a non-negative "
                        f"single digit or an identifier, mark the line `# {ORDERED_ALIKE} (<why>)`",
                    )
                )  # fmt: skip
        elif called != "sort":
            message = f"{called}: {DIVERGENT_CALLS[called]}"
            found.append(CheckFinding(name, number, "warning", "divergent_builtin", message))
        elif "input." in code and SORTED_IDENTIFIERS not in line and SORTED_IDENTIFIERS not in previous:
            found.append(
                CheckFinding(
                    name, number, "warning", "divergent_sort",
                    "sort over input strings: regopy compares strings with their closing quote (\"phone \" < "
                    "\"phone\"; engine-findings item 25) and numbers by their text ([10, 9]; item 34). Sort only "
                    f"identifiers (docs/input-contract.md) and mark the line `# {SORTED_IDENTIFIERS}`, or do not let "
                    "the order decide or be archived",
                )
            )  # fmt: skip
    return found


def _argument_index(name: str, number: int, code: str, lines: list[str]) -> list[CheckFinding]:
    """A function whose comprehension indexes by one of its arguments (engine-findings item 30).

    regopy runs such a comprehension as if the argument were a fresh variable: ``f(k) :=
    [c | some c in input.x[k]]`` gives every element of every ``input.x[_]``, on regopy only.
    The function's whole text is searched (its body, ``else`` branches, comprehensions over
    several lines), without comments and string contents; flagged on the head line. The
    rewrite binds the argument to a local first.
    """
    head = _FUNCTION_HEAD.match(_code_only(lines[number - 1]))
    if head is None:
        return []
    arguments = [a.strip() for a in head.group(2).split(",") if re.fullmatch(r"[A-Za-z_]\w*", a.strip())]
    block = [_code_only(lines[number - 1])]
    for follow in lines[number:]:
        if not follow.strip() or not (follow[0].isspace() or follow.startswith("}")):
            break  # a blank line or the next top-level statement ends the function
        block.append(_code_only(follow))
    text = " ".join(block)
    for bar in re.finditer(r"\|", text):
        for argument in arguments:
            if re.search(rf"[\w\])]\[[^\[\]]*\b{re.escape(argument)}\b", text[bar.end() :]):
                return [
                    CheckFinding(
                        name, number, "warning", "argument_index_in_comprehension",
                        f"a comprehension in {head.group(1)}() indexes by the argument {argument}: regopy "
                        "reads it as a fresh variable and iterates every key (docs/engine-findings.md item 30); "
                        f"bind it first (`key := {argument}`) and index by the local, or index outside the "
                        "comprehension",
                    )
                ]  # fmt: skip
    return []


def _code_only(line: str) -> str:
    """The line without its comment and with string contents blanked (a `#` or `|` in a string is text)."""
    return re.sub(r'"(?:[^"\\]|\\.)*"|`[^`]*`', '""', line).split("#", 1)[0]
