"""Old module paths (``kcp_opa.gate``, ``kcp_opa.receipts``, ...) keep importing for one release.

0.2 moved every module into a stage package (docs/architecture.md). An import of an old path gets
the new module itself (same objects, so ``isinstance`` and monkeypatching still work) and a
``DeprecationWarning`` naming the new path. ``kcp_opa.audit`` is the exception: that name is now the
auditor's package; the decision-log entry builder it held is ``kcp_opa.trail.entries``.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import warnings
from collections.abc import Sequence
from types import ModuleType

#: The release that stops resolving the old paths.
REMOVED_IN = "0.3"

MOVED = {
    "action": "kcp_opa.decide.action",
    "auditor": "kcp_opa.audit.auditor",
    "bundle": "kcp_opa.compile.bundle",
    "canonical": "kcp_opa.core.canonical",
    "caserun": "kcp_opa.authoring.caserun",
    "cases": "kcp_opa.authoring.cases",
    "compiler": "kcp_opa.compile.compiler",
    "controls": "kcp_opa.authorize.controls",
    "datadoc": "kcp_opa.compile.datadoc",
    "decision": "kcp_opa.models.decision",
    "diagnostics": "kcp_opa.declare.diagnostics",
    "effective": "kcp_opa.declare.effective",
    "engine": "kcp_opa.decide.engine",
    "enginecheck": "kcp_opa.compile.enginecheck",
    "errors": "kcp_opa.core.errors",
    "executor": "kcp_opa.execute.executor",
    "gate": "kcp_opa.decide.gate",
    "groupcommit": "kcp_opa.core.groupcommit",
    "ledger": "kcp_opa.trail.ledger",
    "logsetup": "kcp_opa.core.logsetup",
    "manifest": "kcp_opa.declare.manifest",
    "matrix": "kcp_opa.declare.matrix",
    "policycheck": "kcp_opa.authoring.policycheck",
    "policyfiles": "kcp_opa.compile.policyfiles",
    "query": "kcp_opa.decide.query",
    "receipts": "kcp_opa.authorize.receipts",
    "regoinput": "kcp_opa.decide.regoinput",
    "regotest": "kcp_opa.authoring.regotest",
    "render": "kcp_opa.cli.render",
    "ropa": "kcp_opa.audit.ropa",
    "schema_findings": "kcp_opa.declare.schema_findings",
    "signing": "kcp_opa.core.signing",
    "store": "kcp_opa.authorize.store",
    "testreport": "kcp_opa.authoring.testreport",
    "validation": "kcp_opa.declare.validation",
    "vocabulary": "kcp_opa.declare.vocabulary",
    "yamlsource": "kcp_opa.declare.yamlsource",
}


class _Alias(importlib.abc.Loader):
    def __init__(self, target: str) -> None:
        self.target = target

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        warnings.warn(
            f"{spec.name} moved to {self.target}; the old path stops working in kcp-opa {REMOVED_IN}",
            DeprecationWarning,
            stacklevel=2,
        )
        return importlib.import_module(self.target)

    def exec_module(self, module: ModuleType) -> None:
        """The target module is already executed; nothing to run."""


class _MovedFinder(importlib.abc.MetaPathFinder):
    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        old = fullname.removeprefix("kcp_opa.")
        if fullname == old or old not in MOVED:
            return None
        return importlib.util.spec_from_loader(fullname, _Alias(MOVED[old]))


def install() -> None:
    """Resolve the old paths from now on (idempotent)."""
    if not any(isinstance(finder, _MovedFinder) for finder in sys.meta_path):
        sys.meta_path.append(_MovedFinder())
