"""Ad-hoc queries over a bundle, answered in ``opa eval``'s result format.

For auditors without OPA: the same bundle, the same input, the same query, the same JSON
(``{"result": [{"expressions": [{"value", "text", "location"}], "bindings"}]}``, ``{}`` when
undefined). Errors raise :class:`QueryError`; nothing here is a decision.
"""

from __future__ import annotations

from typing import NamedTuple

from kcp_opa.compile.bundle import LoadedBundle
from kcp_opa.core.canonical import canonical_json
from kcp_opa.core.errors import QueryError
from kcp_opa.core.jsonread import JsonDict, JsonObject
from kcp_opa.decide.engine import forbidden_builtin_calls
from kcp_opa.decide.regoinput import read_query_results, rego_input


def evaluate_query(
    bundle: LoadedBundle, query: str, input_doc: object = None, *, values_only: bool = False
) -> JsonObject | list[object]:
    """Evaluate ``query`` with regopy over ``bundle`` (and ``input_doc``)."""
    from regopy import Interpreter
    from regopy import rego_shared as native

    calls = forbidden_builtin_calls({"<query>": query, **bundle.modules})
    if calls:
        raise QueryError(f"refusing a builtin that breaks replay or leaks secrets: {calls[0]}")
    interpreter = Interpreter()
    interpreter.strict_built_in_errors = True
    try:
        interpreter.add_data_json(canonical_json(bundle.data).decode("utf-8"))
        for name, source in sorted(bundle.modules.items()):
            interpreter.add_module(name, source)
        if input_doc is not None:
            interpreter.set_input(rego_input(input_doc))
        # Read byte for byte from the node tree, never regopy.Output's json.loads of unescaped
        # text (docs/engine-findings.md item 23), so replayed strings are the archived ones.
        output = native.rego_query(interpreter._impl, query)
    except (TypeError, ValueError) as exc:
        raise QueryError(f"cannot evaluate: {exc}") from None
    except Exception as exc:  # RegoError and friends from the C side
        raise QueryError(f"regopy failed: {type(exc).__name__}: {exc}") from None
    try:
        if not native.rego_output_ok(output):
            detail = " ".join(str(native.rego_output_string(output)).split())
            raise QueryError(f"query failed: {detail[:500]}")
        results = read_query_results(native.rego_output_node(output))
    except ValueError as exc:
        raise QueryError(f"cannot read the result: {exc}") from None
    finally:
        native.rego_free_output(output)
    answered = [_Result(expressions, bindings) for expressions, bindings in results if expressions or bindings]
    if values_only:
        return [value for result in answered for value in result.expressions]
    if not answered:
        return {}
    texts = _expression_texts(query)
    rendered = []
    for result in answered:
        expressions = result.expressions
        entry: JsonDict = {
            "expressions": [
                {
                    "value": value,
                    "text": texts[index] if len(texts) == len(expressions) else query.strip(),
                    "location": {
                        "row": 1,
                        "col": 1 + query.find(texts[index]) if len(texts) == len(expressions) else 1,
                    },
                }
                for index, value in enumerate(expressions)
            ]
        }
        if result.bindings:
            entry["bindings"] = dict(result.bindings)
        rendered.append(entry)
    return {"result": rendered}


class _Result(NamedTuple):
    expressions: list[object]
    bindings: JsonDict


def _expression_texts(query: str) -> list[str]:
    """The query's expressions split on top-level ';' and newlines (best effort, as opa prints them)."""
    parts: list[str] = []
    current: list[str] = []
    depth, quoted = 0, False
    for char in query:
        if char == '"' and (not current or current[-1] != "\\"):
            quoted = not quoted
        if not quoted:
            depth += char in "([{"
            depth -= char in ")]}"
            if depth == 0 and char in ";\n":
                parts.append("".join(current).strip())
                current = []
                continue
        current.append(char)
    parts.append("".join(current).strip())
    return [part for part in parts if part]
