"""Every name a rule uses resolves: controls, approver roles and waivable codes, before run time.

A finding that requires a control the desk cannot record, an approver role no registered
principal holds, a waivable code no rule emits, or an exception that waives a code no rule lets
it waive, would each pass validation and fail (or do nothing) only when the gate runs.
``kcp-opa check``, ``kcp-opa compile --trust``, ``kcp-opa exceptions check`` and the loading of
signed exceptions ask this module instead, and name the file, the line, the unknown name and
its nearest known spelling (:mod:`difflib`).

What the desk can record is what ``data.kcp.controls`` admits: a control
``kcp.controls.allowed_actors`` lists, or a separation-of-duties control (the two built in,
:data:`kcp_opa.declare.trust.BASE_SOD_CONTROLS`, and the registry's ``separation_of_duties``).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace

from kcp_opa.core.errors import ValidationFailedError
from kcp_opa.core.jsonread import JsonObject, items, mapping
from kcp_opa.declare.diagnostics import Diagnostic, Report, Severity
from kcp_opa.declare.exceptionfile import ExceptionsFile
from kcp_opa.declare.matrix import DelegationMatrix
from kcp_opa.declare.parameters import MatrixParameters
from kcp_opa.declare.trust import BASE_SOD_CONTROLS, TrustRegistry
from kcp_opa.declare.waivers import TERMINAL_CODES, declared
from kcp_opa.declare.yamlsource import load_yaml

_CONTROLS_LIST = re.compile(r'"controls"\s*:\s*\[([^\]]*)\]')
_QUOTED = re.compile(r'"([^"\\]*)"')
_ACTORS_BLOCK = re.compile(r"^allowed_actors\s*:=\s*\{(.*?)^\}", re.MULTILINE | re.DOTALL)
_ACTOR_KEY = re.compile(r'^\s*"([^"]+)"\s*:', re.MULTILINE)
_CODE_LITERAL = re.compile(r'"code"\s*:\s*"([^"\\]+)"')
_CODE_COMPUTED = re.compile(r'"code"\s*:\s*[A-Za-z_]')


@dataclass(frozen=True)
class Unresolved:
    """One name that does not resolve: where it is used, what kind of name, and what to do."""

    file: str
    line: int | None
    code: str
    name: str
    message: str

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line is not None else self.file
        return f"{where}: {self.message} [{self.code}]"


def nearest(name: str, known: Iterable[str]) -> str:
    """`` (did you mean X?)`` for the closest known spelling, or nothing when none is close."""
    close = difflib.get_close_matches(name, sorted(known), n=1, cutoff=0.75)
    return f" (did you mean {close[0]}?)" if close else ""


def _policy(modules: Mapping[str, str]) -> dict[str, str]:
    return {name: source for name, source in sorted(modules.items()) if not name.endswith("_test.rego")}


def _line(source: str, offset: int) -> int:
    return source.count("\n", 0, offset) + 1


def required_controls(modules: Mapping[str, str]) -> list[tuple[str, int, str]]:
    """(file, line, control) for every control a finding literal of a policy module requires."""
    found = []
    for name, source in _policy(modules).items():
        for match in _CONTROLS_LIST.finditer(source):
            for control in _QUOTED.finditer(match.group(1)):
                found.append((name, _line(source, match.start(1) + control.start()), control.group(1)))
    return found


def recordable_controls(modules: Mapping[str, str], trust: JsonObject | None) -> frozenset[str]:
    """The controls ``data.kcp.controls`` admits: allowed_actors, and the separation-of-duties set."""
    known = set(BASE_SOD_CONTROLS)
    for source in _policy(modules).values():
        for block in _ACTORS_BLOCK.finditer(source):
            known |= set(_ACTOR_KEY.findall(block.group(1)))
    if trust is not None:
        known |= {str(c) for c in items(trust.get("separation_of_duties"))}
    return frozenset(known)


def unresolved_controls(modules: Mapping[str, str], trust: JsonObject | None) -> list[Unresolved]:
    """Each required control the desk would refuse as ``unknown_control``, naming where to declare it."""
    known = recordable_controls(modules, trust)
    how = "a human control" if trust is not None else "a human control; check reads it from --bundle, compiled --trust"
    return [
        Unresolved(
            file, line, "unknown_control", control,
            f"a finding requires control {control}, which the control desk cannot record{nearest(control, known)}: "
            f"declare it in the trust registry's separation_of_duties ({how}) or in kcp.controls.allowed_actors",
        )
        for file, line, control in required_controls(modules)
        if control not in known
    ]  # fmt: skip


def emitted_codes(modules: Mapping[str, str]) -> frozenset[str]:
    """Every reason code a policy module writes as a literal (``"code": "x"``)."""
    return frozenset(code for source in _policy(modules).values() for code in _CODE_LITERAL.findall(source))


def waivable_codes(modules: Mapping[str, str]) -> frozenset[str]:
    """The codes the policies let an exception waive (``custom.waivable``), terminal ones never."""
    return frozenset(w.code for w in declared(modules) if w.code not in TERMINAL_CODES)


def _computes_its_code(source: str, line: int) -> bool:
    """Whether the rule whose METADATA starts at ``line`` builds its code (``"code": text1``)."""
    rest = source.splitlines()[line:]
    end = next((i for i, text in enumerate(rest) if text.strip() == "# METADATA"), len(rest))
    return _CODE_COMPUTED.search("\n".join(rest[:end])) is not None


def unresolved_waivables(modules: Mapping[str, str]) -> list[Unresolved]:
    """Each ``custom.waivable`` code no rule emits (a rule that computes its code is not judged)."""
    emitted = emitted_codes(modules)
    policy = _policy(modules)
    return [
        Unresolved(
            w.file, w.line, "unknown_waivable", w.code,
            f"custom.waivable lists {w.code}, which no rule emits{nearest(w.code, emitted)}",
        )
        for w in declared(modules)
        if w.code not in emitted and w.code not in TERMINAL_CODES and not _computes_its_code(policy[w.file], w.line)
    ]  # fmt: skip


def policy_problems(modules: Mapping[str, str], trust: JsonObject | None) -> list[Unresolved]:
    """What ``kcp-opa check`` refuses: unrecordable controls and waivable codes no rule emits.
    ``trust``: the registry as the bundle holds it (``kcp_data.trust``), when known."""
    return unresolved_controls(modules, trust) + unresolved_waivables(modules)


def unresolved_approver_roles(
    parameters: MatrixParameters,
    trust: JsonObject,
    file: str,
    line_of: Callable[[tuple[str, ...]], int | None] | None = None,
) -> list[Unresolved]:
    """Each matrix approver role (``parameters.approver_roles``) no registered principal holds.

    ``line_of``: the matrix source's ``line_of`` (a path -> line), for the line of each role.
    """
    roles = parameters.approver_roles
    held = {str(r) for p in mapping(trust.get("principals")).values() for r in items(mapping(p).get("roles"))}
    named: list[tuple[tuple[str, ...], str]] = [(("parameters", "approver_roles", "default"), roles.default)]
    named += [
        (("parameters", "approver_roles", "by_task_type", task), role)
        for task, role in sorted((roles.by_task_type or {}).items())
    ]
    return [
        Unresolved(
            file, line_of(path) if line_of is not None else None, "unknown_approver_role", str(role),
            f"approver role {role} ({'.'.join(path[1:])}) is held by no principal of the trust registry"
            f"{nearest(str(role), held)}: give a principal that role, or name a role one holds",
        )
        for path, role in named
        if role not in held
    ]  # fmt: skip


def unresolved_matrix_controls(
    parameters: MatrixParameters,
    known: frozenset[str],
    file: str,
    line_of: Callable[[tuple[str | int, ...]], int | None] | None = None,
) -> list[Unresolved]:
    """Each control the matrix sets for a money threshold (``money_controls_by_task_type``) that
    the control desk cannot record: a finding requiring it could never be cleared."""
    return [
        Unresolved(
            file, line_of(path) if line_of is not None else None, "unknown_control", control,
            f"{'.'.join(str(p) for p in path[1:-1])} names control {control}, which the control desk cannot "
            f"record{nearest(control, known)}: name a known control, or declare it in the trust registry's "
            "separation_of_duties (a human control)",
        )
        for path, control in parameters.named_controls()
        if control not in known
    ]  # fmt: skip


def refuse_unresolved(modules: Mapping[str, str], matrix: DelegationMatrix, trust: TrustRegistry | None) -> None:
    """``compile``: :class:`ValidationFailedError` naming every name that does not resolve: the
    matrix's money controls always; with ``--trust`` also the policies' controls, waivable codes
    and the approver roles (without a registry the desk records only the built-in controls)."""
    data = trust.to_data() if trust is not None else None
    source = load_yaml(matrix.file)
    problems = policy_problems(modules, data) if data is not None else []
    if data is not None:
        problems += unresolved_approver_roles(matrix.parameters(), data, matrix.file, source.line_of)
    known = recordable_controls(modules, data)
    problems += unresolved_matrix_controls(matrix.parameters(), known, matrix.file, source.line_of)
    if problems:
        raise ValidationFailedError(problems[0].file, [str(p) for p in problems])


def unresolved_waived_codes(
    waived: Iterable[tuple[str, int | None, str, str]], waivable: frozenset[str], source: str
) -> list[Unresolved]:
    """Each (file, line, exception id, code) an exception waives that no rule lets it waive.

    ``source`` names where ``waivable`` came from (the policies or a bundle), for the message.
    """
    out = []
    for file, line, ident, code in waived:
        if code in TERMINAL_CODES:
            why = "a terminal denial, never waivable"
        elif code in waivable:
            continue
        else:
            why = f"not a code the policies let an exception waive (custom.waivable of {source})"
        out.append(
            Unresolved(
                file, line, "unwaivable_code", code,
                f"exception {ident} waives {code}: {why}{nearest(code, waivable)}; it would waive nothing",
            )
        )  # fmt: skip
    return out


def _waived(held: ExceptionsFile) -> list[tuple[tuple[str | int, ...], int | None, str, str]]:
    """(YAML path, line, exception id, code) for every code every exception of ``held`` waives."""
    source = load_yaml(held.file) if held.lines else None  # read from a file: each code's own line
    found = []
    for index, item in enumerate(held.exceptions):
        for position, code in enumerate(item.waives):
            path: tuple[str | int, ...] = ("exceptions", index, "waives", position)
            found.append((path, source.line_of(path) if source is not None else None, item.id, code))
    return found


def exception_problems(held: ExceptionsFile, waivable: frozenset[str], source: str) -> list[Unresolved]:
    """Each code an exception of ``held`` waives that ``waivable`` (from ``source``) does not list."""
    return unresolved_waived_codes(
        [(held.file, line, ident, code) for _, line, ident, code in _waived(held)], waivable, source
    )


def refuse_unwaivable(held: ExceptionsFile, waivable: frozenset[str], source: str) -> None:
    """Loading exceptions: :class:`ValidationFailedError` when one waives what no rule lets it waive."""
    problems = exception_problems(held, waivable, source)
    if problems:
        raise ValidationFailedError(held.file, [str(p) for p in problems])


def check_waived(report: Report[ExceptionsFile], waivable: frozenset[str], source: str) -> Report[ExceptionsFile]:
    """``report`` with an error (and its line) for each code no rule lets an exception waive."""
    if report.document is None:
        return report
    found = [
        Diagnostic(Severity.ERROR, "unwaivable_code", problem.message, path, line, report.file)
        for path, line, ident, code in _waived(report.document)
        for problem in unresolved_waived_codes([(report.file, line, ident, code)], waivable, source)
    ]
    if not found:
        return report
    return replace(report, diagnostics=(*report.diagnostics, *found), document=None)
