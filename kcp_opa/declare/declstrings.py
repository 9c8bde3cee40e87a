"""The string contract for declarations: every manifest, matrix and registry string the policies read.

The bundle carries these strings to both engines as JSON data, where regopy keeps every JSON
escape inside the string (kcp_opa/core/strings.py): a ``not_for`` entry ending in LF (a YAML
``|`` block) never matched on regopy and did on OPA. So each string at a path below must pass
:func:`kcp_opa.core.strings.data_text_problem`, and where the policies match, index or sort it,
:func:`kcp_opa.core.strings.identifier_problem` too (empty strings included: an empty condition
value is the bundle's "no condition lists it" key). Findings carry the path, so ``validate`` and
``compile`` name file and line. ``compile`` checks the whole data document once more
(:func:`check_data_strings`), so a path missing here is refused, never carried.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache

from kcp_opa.core import strings
from kcp_opa.core.errors import CompileError
from kcp_opa.core.jsonread import JsonObject
from kcp_opa.core.textfold import TextFoldError, fold_text
from kcp_opa.declare.diagnostics import Findings, PathPart

TEXT, IDENT = "text", "identifier"
#: A segment matching any key or index; ``#`` the keys of a mapping; ``**`` any rest of the path.
ANY, KEYS, REST = "*", "#", "**"

Rule = tuple[tuple[str, ...], str]


def _rules(*specs: tuple[str, str]) -> tuple[Rule, ...]:
    return tuple((tuple(path.split("/")), kind) for path, kind in specs)


#: Blocks a unit and the root share (the unit's replaces or tightens the root's).
_SHARED = (
    ("compliance/sensitivity", IDENT),
    ("compliance/regulations/*", IDENT),
    ("compliance/restrictions/*", IDENT),
    ("compliance/data_categories/*", IDENT),
    ("compliance/declared_fields/*", IDENT),
    ("compliance/declared_fields_by_task_type/#", IDENT),
    ("compliance/declared_fields_by_task_type/*/*", IDENT),
    ("compliance/data_residency/*", IDENT),
    ("compliance/data_residency/regions/*", IDENT),
    ("compliance/legal_basis", IDENT),
    ("delegation/human_in_the_loop/approval_mechanism", IDENT),
    ("freshness_policy/on_stale", IDENT),
    ("freshness_policy/review_contact", TEXT),
    ("authority/#", IDENT),
    ("authority/*", TEXT),
    ("visibility/default", IDENT),
    ("visibility/conditions/*/when/#", IDENT),
    ("visibility/conditions/*/when/*", IDENT),
    ("visibility/conditions/*/when/*/*", IDENT),
    ("visibility/conditions/*/then/sensitivity", IDENT),
    ("rate_limits/**", TEXT),
    ("temporal/**", TEXT),
    ("temporal/superseded_by", IDENT),
)

MANIFEST_RULES = _rules(
    ("version", TEXT),
    ("kcp_version", TEXT),
    *_SHARED,
    ("units/*/access", IDENT),
    ("units/*/auth_scope", IDENT),
    ("units/*/sensitivity", IDENT),
    ("units/*/validated", TEXT),
    ("units/*/supersedes", IDENT),
    ("units/*/not_for/*", TEXT),
    *((f"units/*/{path}", kind) for path, kind in _SHARED),
)

MATRIX_RULES = _rules(
    ("name", TEXT),
    ("version", TEXT),
    ("task_types/#", IDENT),
    ("task_types/*/kcp_action", IDENT),
    ("task_types/*/requested_actions/*", IDENT),
    ("task_types/*/data_categories/#", IDENT),
    ("task_types/*/data_categories/*", IDENT),
    ("task_types/*/sensitivity/#", IDENT),
    ("task_types/*/sensitivity/*", IDENT),
    ("parameters/**", TEXT),
    ("parameters/approver_roles/default", IDENT),
    ("parameters/approver_roles/by_task_type/#", IDENT),
    ("parameters/approver_roles/by_task_type/*", IDENT),
    ("parameters/sender_roles/*", IDENT),
    ("parameters/context/knowledge_bound_task_types/*", IDENT),
    ("parameters/money/*/#", IDENT),
    ("parameters/money_moving_task_types/*", IDENT),
    ("parameters/money_controls_by_task_type/#", IDENT),
    ("parameters/money_controls_by_task_type/*/*", IDENT),
    ("parameters/money_controls_by_task_type/*/*/*", IDENT),
)

TRUST_RULES = _rules(
    ("name", TEXT),
    ("version", TEXT),
    ("separation_of_duties/*", IDENT),
    ("principals/*/roles/*", IDENT),
    ("principals/*/auth_scopes/*", IDENT),
    ("principals/*/tenants/*", IDENT),
    # the gate facts the registry establishes (kcp_opa.context.facts): identifiers as the action's
    ("principals/*/actor_role", IDENT),
    ("principals/*/agent_scope/*", IDENT),
    ("principals/*/model/id", IDENT),
    ("principals/*/model/hosting", IDENT),
    ("issuers/*/controls/*", IDENT),
)


def check_declaration_strings(doc: JsonObject, rules: Sequence[Rule], findings: Findings) -> None:
    """An error for each string (or key) at a rule's path that breaks the contract.

    The walk follows the rules (a trie), so what no rule names (intents, paths, descriptions) is
    never visited: a 100,000-unit manifest costs what its policy-read strings do.
    """
    for path, value, kinds in _ruled_strings(doc, _trie(tuple(rules))):
        problem = strings.data_text_problem(value)
        if problem is not None:
            findings.error("declaration_characters", f"{_shown(value)}: {problem}", path)
        elif IDENT in kinds and (why := strings.identifier_problem(value)) is not None:
            findings.error(
                "declaration_not_identifier",
                f"{_shown(value)}: {why} is not allowed where the policies match, index or sort a value "
                f"(an identifier: {strings.IDENTIFIER_RULE}; the same rule as an action's)",
                path,
            )
        elif path[-2:-1] == ("not_for",):
            _check_not_for(value, path, findings)


def _check_not_for(value: str, path: tuple[PathPart, ...], findings: Findings) -> None:
    """A not_for entry must fold (kcp_opa.core.textfold) to something, as the purposes it excludes do."""
    try:
        folded = fold_text(value)
    except TextFoldError as exc:
        findings.error("declaration_unreadable", f"{_shown(value)}: {exc}; spell the purpose in one script", path)
        return
    if not folded:
        findings.error("declaration_empty", "a not_for entry that folds to nothing matches no purpose", path)


@dataclass
class _Node:
    children: dict[str, _Node] = field(default_factory=dict)
    values: set[str] = field(default_factory=set)  # kinds for a string at this node
    keys: set[str] = field(default_factory=set)  # kinds for this mapping's keys (``#``)
    below: set[str] = field(default_factory=set)  # kinds for every string and key under it (``**``)


@cache
def _trie(rules: tuple[Rule, ...]) -> _Node:
    root = _Node()
    for pattern, kind in rules:
        node = root
        for position, segment in enumerate(pattern):
            last = position == len(pattern) - 1
            if segment == REST:
                node.below.add(kind)
                break
            if segment == KEYS and last:
                node.keys.add(kind)
                break
            node = node.children.setdefault(segment, _Node())
            if last:
                node.values.add(kind)
    return root


def _ruled_strings(doc: object, root: _Node) -> Iterator[tuple[tuple[PathPart, ...], str, set[str]]]:
    """(path, string, kinds) for every string and key some rule names."""
    stack: list[tuple[object, tuple[PathPart, ...], tuple[_Node, ...], frozenset[str]]] = [
        (doc, (), (root,), frozenset())
    ]
    while stack:
        value, path, nodes, inherited = stack.pop()
        below = inherited.union(*(n.below for n in nodes))
        if isinstance(value, str):
            kinds = set(inherited).union(*(n.values for n in nodes))
            if kinds:
                yield path, value, kinds
        elif isinstance(value, Mapping):
            key_kinds = set(below).union(*(n.keys for n in nodes))
            for key, item in value.items():
                if isinstance(key, str) and key_kinds:
                    yield (*path, key), key, key_kinds
                children = tuple(c for n in nodes for c in (n.children.get(str(key)), n.children.get(ANY)) if c)
                if children or below:
                    stack.append((item, (*path, key), children, below))
        elif isinstance(value, list):
            children = tuple(c for n in nodes if (c := n.children.get(ANY)) is not None)
            if children or below:
                stack.extend((item, (*path, i), children, below) for i, item in enumerate(value))


def check_data_strings(data: JsonObject) -> None:
    """Refuse a compiled data document holding any string regopy would read escaped (the backstop)."""
    for path, value, _ in _strings(data, ()):
        problem = strings.data_text_problem(value)
        if problem is not None:
            where = "/".join(str(p) for p in path)
            raise CompileError(f"bundle data {where}: {problem}")


def _strings(node: object, path: tuple[PathPart, ...]) -> Iterator[tuple[tuple[PathPart, ...], str, bool]]:
    stack: list[tuple[object, tuple[PathPart, ...]]] = [(node, path)]
    while stack:
        value, here = stack.pop()
        if isinstance(value, str):
            yield here, value, False
        elif isinstance(value, Mapping):
            for key, item in value.items():
                if isinstance(key, str):
                    yield (*here, key), key, True
                stack.append((item, (*here, key)))
        elif isinstance(value, list):
            stack.extend((item, (*here, index)) for index, item in enumerate(value))


def _shown(value: str) -> str:
    return repr(value[:60] + ("..." if len(value) > 60 else "")).encode("ascii", "backslashreplace").decode("ascii")
