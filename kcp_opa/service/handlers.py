"""Execution handlers: the callables a server may run, named in its config as ``module:function``.

The server never runs anything a caller names by code: ``execute_authorized_action`` picks one
of these by name, after the receipt is verified and consumed.
"""

from __future__ import annotations

import importlib
import inspect
import sys
from collections.abc import Mapping
from pathlib import Path

from kcp_opa.core.errors import CodedError
from kcp_opa.execute.executor import Handler


def load_handlers(spec: Mapping[str, str], base: Path | None = None) -> dict[str, Handler]:
    """``{"name": "package.module:function"}`` -> the callables, each imported and checked now, at
    start: an importable module (``base``, the handlers file's directory, comes first on the import
    path, then PYTHONPATH and the installed packages) and a callable that takes one argument, the
    action (``fn(action) -> JSON value``)."""
    if base is not None and str(base) not in sys.path:
        sys.path.insert(0, str(base))
    handlers: dict[str, Handler] = {}
    for name, target in spec.items():
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
        handlers[str(name)] = found
    return handlers
