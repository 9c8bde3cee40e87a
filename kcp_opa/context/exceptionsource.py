"""Exceptions as a context source: loaded and verified at start and on reload, like the bundle.

The gate passes every verified exception to the policy (``input.context.exceptions``), so the
archived input holds the exceptions a decision saw and a replay applies exactly those; which
of them cover the action and whether each is current at the decision time is the policy's
(``kcp.gate.exceptions``). A file with a forged, unsigned, too long or terminal-waiving entry, or
(given the bundle's ``waivable`` codes) one waiving a code no rule lets it waive, is refused
whole with one line (:class:`kcp_opa.core.errors.ValidationFailedError`); a refused reload keeps
the exceptions in force.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Protocol

from kcp_opa.compile.resolution import refuse_unwaivable
from kcp_opa.core.jsonread import JsonDict, JsonObject
from kcp_opa.core.signing import Keyring
from kcp_opa.declare.exceptionfile import (
    ExceptionsFile,
    exceptions_from_data,
    load_exceptions,
)
from kcp_opa.declare.parameters import DEFAULT_MAX_LIFETIME_SECONDS
from kcp_opa.declare.trust import TrustRegistry


class ExceptionSource(Protocol):
    """The verified exceptions, as the policy reads them."""

    def exceptions(self) -> list[JsonDict]: ...

    def describe(self) -> JsonDict: ...


class SignedExceptions:
    """Verified exceptions: the file at ``path`` (:meth:`reload` re-reads it), or a document in memory."""

    def __init__(
        self,
        registry: TrustRegistry,
        *,
        path: str | Path | None = None,
        document: JsonObject | None = None,
        keyring: Keyring | None = None,
        max_lifetime_seconds: int = DEFAULT_MAX_LIFETIME_SECONDS,
        waivable: frozenset[str] | None = None,
    ) -> None:
        if (path is None) == (document is None):
            raise ValueError("exceptions come from a path or a document")
        self.path = Path(path) if path is not None else None
        self.document, self.registry, self.keyring = document, registry, keyring
        self.max_lifetime_seconds = max_lifetime_seconds
        self.waivable = waivable  # the bundle's custom.waivable codes: an exception waiving another is refused
        self._lock = threading.Lock()
        self._held = self._load()
        self._input = [e.to_input() for e in self._held.exceptions]

    def _load(self) -> ExceptionsFile:
        if self.path is None:
            held = exceptions_from_data(
                self.document or {},
                self.registry,
                keyring=self.keyring,
                max_lifetime_seconds=self.max_lifetime_seconds,
            )
        else:
            held = load_exceptions(
                self.path, self.registry, keyring=self.keyring, max_lifetime_seconds=self.max_lifetime_seconds
            )
        if self.waivable is not None:
            refuse_unwaivable(held, self.waivable, "the bundle's policies")
        return held

    def reload(self) -> ExceptionsFile:
        """All or nothing: a file that does not verify raises and the held exceptions stay."""
        loaded = self._load()
        with self._lock:
            self._held, self._input = loaded, [e.to_input() for e in loaded.exceptions]
        return loaded

    @property
    def held(self) -> ExceptionsFile:
        with self._lock:
            return self._held

    def exceptions(self) -> list[JsonDict]:
        with self._lock:
            return [dict(e) for e in self._input]

    def describe(self) -> JsonDict:
        held = self.held
        return {"kind": "exceptions", "name": held.name, "sha256": held.sha256, "held": len(held.exceptions)}
