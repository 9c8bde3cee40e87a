"""Execution handlers: the callables a server may run, named in its config as ``module:function``.

The server never runs anything a caller names by code: ``execute_authorized_action`` picks one
of these by name, after the receipt is verified and consumed.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping

from kcp_opa.core.errors import CodedError
from kcp_opa.execute.executor import Handler


def load_handlers(spec: Mapping[str, str]) -> dict[str, Handler]:
    """``{"name": "package.module:function"}`` -> the callables (an importable, callable target each)."""
    handlers: dict[str, Handler] = {}
    for name, target in spec.items():
        module_name, _, attribute = str(target).partition(":")
        if not module_name or not attribute:
            raise CodedError(f"handler {name}: {target!r} is not 'module:function'", "bad_handler")
        try:
            found = getattr(importlib.import_module(module_name), attribute)
        except (ImportError, AttributeError) as exc:
            raise CodedError(f"handler {name}: cannot import {target}: {exc}", "bad_handler") from None
        if not callable(found):
            raise CodedError(f"handler {name}: {target} is not callable", "bad_handler")
        handlers[str(name)] = found
    return handlers
