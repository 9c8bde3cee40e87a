"""The cross-checked gate's second engine: OPA, the auditors' reference, in this process.

``GateConfig(cross_check="opa")`` evaluates every decision on regopy and on OPA
(the Go ``rego`` package through ``opa-golib-python-bindings``, mounted as ``opa eval -b``
mounts a bundle) from the one prepared input, and any difference is a DENY with reason
``engine_divergence``. Off by default: OPA is a test and audit extra, imported only here and
only when asked for.
"""

from __future__ import annotations

import structlog

from kcp_opa.compile.bundle import LoadedBundle
from kcp_opa.core.errors import EngineLoadError, QueryError
from kcp_opa.core.jsonread import JsonDict, JsonObject
from kcp_opa.decide.engine import DECISION_ENTRYPOINT, EngineResult, Evaluator, forbidden_builtin_calls, one_line

CROSS_CHECK_ENGINES = ("opa",)


_log = structlog.get_logger("kcp_opa.gate")


def cross_checked(
    engine: Evaluator, reference: OpaReference | None, document: JsonObject, decision_id: str
) -> tuple[EngineResult, JsonDict | None]:
    """regopy's result, or a divergence error with both engines' answers (with a reference only)."""
    result = engine.evaluate(document)
    if reference is None:
        return result, None
    other = reference.evaluate(document)
    if result.error is not None and other.error is not None:
        return result, None  # no decision on either engine: an engine error, not a divergence
    where = first_difference(result.value, other.value) if result.error is None and other.error is None else "/"
    if where is None:
        return result, None
    answers: JsonDict = {
        "regopy": result.value if result.error is None else {"engine_error": result.error},
        "opa": other.value if other.error is None else {"engine_error": other.error},
    }
    _log.error("engine_divergence", decision_id=decision_id, at=where)
    return EngineResult(None, f"engine_divergence: regopy and OPA differ at {where}"), answers


class OpaReference:
    """One bundle on the OPA reference engine; ``evaluate`` never raises (as ``RegopyEngine``)."""

    def __init__(self, bundle: LoadedBundle, entrypoint: str = DECISION_ENTRYPOINT) -> None:
        try:
            from opa_bindings import OpaEngine
        except ImportError:
            raise EngineLoadError(
                "cross_check='opa' needs the OPA reference engine (pip install opa-golib-python-bindings)"
            ) from None
        self.path = entrypoint.replace("/", ".")
        self._engine = OpaEngine()
        try:
            for name, source in sorted(bundle.modules.items()):
                self._engine.add_policy(name, source)
            self._engine.add_data(dict(bundle.data))
        except Exception as exc:
            raise EngineLoadError(f"{bundle.source}: OPA cannot load the bundle: {one_line(exc)}") from None

    def evaluate(self, input_doc: JsonObject) -> EngineResult:
        """The entrypoint's value on OPA (its engine serialises evaluations across threads)."""
        try:
            value = self._engine.eval_document(self.path, dict(input_doc))
        except Exception as exc:  # OpaUndefinedError, OpaError: no decision to compare
            return EngineResult(None, f"OPA: {type(exc).__name__}: {one_line(exc)}")
        if not isinstance(value, dict):
            return EngineResult(None, f"OPA: {self.path} did not produce one object")
        return EngineResult(value)


def opa_query(bundle: LoadedBundle, query: str, input_doc: object = None, *, values_only: bool = False) -> object:
    """Evaluate ``query`` on OPA over ``bundle``, answering as ``opa eval -b BUNDLE`` does: its
    result document (``{}`` when undefined), or the expression values only.

    The bindings' public ``eval_query`` keeps only the bindings; the result set (expressions
    with their text and location, as ``opa eval`` prints them) is read the way it reads it.
    """
    calls = forbidden_builtin_calls({"<query>": query, **bundle.modules})
    if calls:
        raise QueryError(f"refusing a builtin that breaks replay or leaks secrets: {calls[0]}")
    reference = OpaReference(bundle)
    engine = reference._engine
    try:
        from opa_bindings.engine import _cstr, _encode_input

        with engine._eval_lock:
            engine._eval_reset()
            raw = engine._call(engine._lib.OpaEvalQuery, _cstr(query), _encode_input(input_doc), 0, 0)
            results = engine._eval_result(raw) or []
    except Exception as exc:  # OpaError (parse, compile, evaluation): one line, never a traceback
        raise QueryError(f"OPA: {one_line(exc)}") from None
    finally:
        engine.close()
    if values_only:
        return [e.get("value") for r in results for e in r.get("expressions", [])]
    return {"result": results} if results else {}


def first_difference(left: object, right: object, path: str = "") -> str | None:
    """The JSON pointer of the first place two JSON values differ (None when equal)."""
    if type(left) is not type(right):
        return path or "/"
    if isinstance(left, dict) and isinstance(right, dict):
        for key in sorted(set(left) | set(right)):
            if key not in left or key not in right:
                return f"{path}/{key}"
            found = first_difference(left[key], right[key], f"{path}/{key}")
            if found is not None:
                return found
        return None
    if isinstance(left, list) and isinstance(right, list):
        for index, (a, b) in enumerate(zip(left, right, strict=False)):
            found = first_difference(a, b, f"{path}/{index}")
            if found is not None:
                return found
        return None if len(left) == len(right) else f"{path}/{min(len(left), len(right))}"
    return None if left == right else (path or "/")
