"""Execution handlers: the callables a server may run, named in its config as ``module:function``.

The server never runs anything a caller names by code: ``execute_authorized_action`` picks one
of these by name, after the receipt is verified and consumed.
"""

from __future__ import annotations

import importlib
import inspect
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

from kcp_opa.compile.datadoc import DATA_ROOT
from kcp_opa.core.errors import CodedError
from kcp_opa.core.jsonread import JsonDict, JsonObject, items, mapping, strings
from kcp_opa.execute.executor import Handler


class BoundHandler:
    """A handler with the ``requested_action`` values it may run for (a plain callable runs only
    for the action its registered name names): a receipt for ``execute_payment`` never runs a
    handler registered for something else."""

    def __init__(self, function: Handler, actions: Iterable[str]) -> None:
        self.function, self.actions = function, frozenset(actions)

    def __call__(self, action: JsonObject) -> object:
        return self.function(action)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, BoundHandler) and (self.function, self.actions) == (other.function, other.actions)

    def __hash__(self) -> int:
        return hash((self.function, self.actions))


def bound(function: Handler, *actions: str) -> BoundHandler:
    """``function`` bound to the ``requested_action`` values ``actions``."""
    return BoundHandler(function, actions)


def bound_handler(handlers: Mapping[str, Handler], name: str, action: object) -> Handler:
    """Handler ``name``, refused (``unknown_handler``, ``handler_not_bound``) unless it is registered
    and may run for the action's ``requested_action``."""
    function = handlers.get(name)
    if function is None:
        known = ", ".join(sorted(handlers)) or "none registered"
        raise CodedError(f"no handler {name!r} ({known})", "unknown_handler")
    actions = function.actions if isinstance(function, BoundHandler) else frozenset({name})
    requested = action.get("requested_action") if isinstance(action, Mapping) else None
    if requested not in actions:
        raise CodedError(
            f"handler {name!r} runs for requested_action {', '.join(sorted(actions))}, not {str(requested)[:128]!r}",
            "handler_not_bound",
        )
    return function


def binding_gaps(handlers: Mapping[str, Handler], bundle_data: JsonObject) -> list[tuple[str, JsonDict]]:
    """Where the handlers' tools and the bundle's task types do not fit, as (event, fields) log lines.

    A handler runs for a ``requested_action`` (its tool); the matrix binds tools to task types
    (``data.kcp_data.matrix.requested_actions``). A matrix that binds none lets any task type,
    the weakest included, request any handler's tool; a tool listed under no task type is denied
    to every action, so no receipt ever runs its handler. Both are said at start and on reload:
    warnings, since either may be meant.
    """
    if not handlers:
        return []
    matrix = mapping(mapping(bundle_data.get(DATA_ROOT)).get("matrix"))
    binding = mapping(matrix.get("requested_actions"))
    tools = {n: sorted(h.actions) if isinstance(h, BoundHandler) else [n] for n, h in sorted(handlers.items())}
    if not binding:
        effect = "any task type may request any handler's tool: list each task type's requested_actions in the matrix"
        return [("tools_unbound", {"matrix": matrix.get("name"), "handlers": list(tools), "effect": effect})]
    listed = {tool for listing in binding.values() for tool in items(listing)}
    unlisted = {n: [t for t in ts if t not in listed] for n, ts in tools.items()}
    unlisted = {n: ts for n, ts in unlisted.items() if ts}
    if not unlisted:
        return []
    effect = "listed under no task type: every action requesting it is denied, no receipt can run its handler"
    return [("handler_tools_unlisted", {"matrix": matrix.get("name"), "tools": unlisted, "effect": effect})]


def load_handlers(spec: JsonObject, base: Path | None = None) -> dict[str, Handler]:
    """``{"name": "module:function"}`` (runs for ``requested_action`` ``name``) or
    ``{"name": {"target": "module:function", "actions": ["execute_payment"]}}`` -> the callables,
    each imported and checked now, at start: an importable module (``base``, the handlers file's
    directory, comes first on the import path, then PYTHONPATH and the installed packages) and a
    callable that takes one argument, the action (``fn(action) -> JSON value``)."""
    if base is not None and str(base) not in sys.path:
        sys.path.insert(0, str(base))
    handlers: dict[str, Handler] = {}
    for name, entry in spec.items():
        target: object = entry
        actions = [str(name)]
        if isinstance(entry, Mapping):
            target, listed = entry.get("target"), entry.get("actions")
            if not isinstance(listed, list) or not listed or not all(isinstance(a, str) and a for a in listed):
                refusal = f"handler {name}: 'actions' is a non-empty list of requested_action names"
                raise CodedError(refusal, "bad_handler")
            actions = strings(listed)
        module_name, _, attribute = str(target).partition(":")
        if not module_name or not attribute:
            raise CodedError(f"handler {name}: {target!r} is not 'module:function'", "bad_handler")
        try:
            found = getattr(importlib.import_module(module_name), attribute)
        except (ImportError, AttributeError) as exc:
            where = f" (looked in {base}, then PYTHONPATH)" if base is not None else ""
            raise CodedError(f"handler {name}: cannot import {target}: {exc}{where}", "bad_handler") from None
        except Exception as exc:  # the module itself fails to load (a syntax error, an import-time error)
            raise CodedError(
                f"handler {name}: importing {module_name} failed: {type(exc).__name__}: {exc}", "bad_handler"
            ) from None
        if not callable(found):
            raise CodedError(f"handler {name}: {target} is not callable", "bad_handler")
        try:
            inspect.signature(found).bind({})
        except TypeError:
            raise CodedError(
                f"handler {name}: {target} must take one argument, the action (fn(action))", "bad_handler"
            ) from None
        except ValueError:
            pass  # a builtin without a readable signature: called as fn(action) all the same
        handlers[str(name)] = BoundHandler(found, actions)
    return handlers
