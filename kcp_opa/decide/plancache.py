"""The plan cache's binding: a cached rego-cpp plan is used only for the bundle it was built from.

Beside each ``<key>.rbb`` sits ``<key>.json`` naming the bundle's sha256, the entrypoint and the
plan's own sha256. A plan is loaded only when the binding names this bundle and the plan bytes
hash to what it records, and it is loaded from a private copy (no swap between check and
load). A plan copied or planted under another bundle's key is rebuilt, never used. The cache
directory must still be writable only by the gate's user: the binding stops mix-ups and planted
copies, not a writer who can also forge ``<key>.json``.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path

import structlog

_log = structlog.get_logger("kcp_opa.engine")


def binding_path(plan: Path) -> Path:
    return plan.with_suffix(".json")


def bind(plan: Path, bundle_sha256: str, entrypoint: str) -> None:
    """Record which bundle ``plan`` belongs to (written after the plan, atomically)."""
    document = {
        "bundle_sha256": bundle_sha256,
        "entrypoint": entrypoint,
        "plan_sha256": hashlib.sha256(plan.read_bytes()).hexdigest(),
    }
    temporary = plan.with_name(f".{plan.stem}.{os.getpid()}.json.tmp")
    temporary.write_text(json.dumps(document, sort_keys=True), encoding="utf-8")
    temporary.replace(binding_path(plan))


def verified_copy(plan: Path, bundle_sha256: str, entrypoint: str) -> Path | None:
    """A private copy of ``plan`` if it is bound to this bundle and intact; None to rebuild."""
    if not plan.is_file():
        return None
    try:
        binding = json.loads(binding_path(plan).read_text(encoding="utf-8"))
        content = plan.read_bytes()
    except (OSError, ValueError) as exc:
        _log.warning("plan_cache_rejected", path=str(plan), reason=f"no readable binding: {exc}")
        return None
    expected = {
        "bundle_sha256": bundle_sha256,
        "entrypoint": entrypoint,
        "plan_sha256": hashlib.sha256(content).hexdigest(),
    }
    if binding != expected:
        _log.warning("plan_cache_rejected", path=str(plan), reason="bound to another bundle or altered")
        return None
    fd, name = tempfile.mkstemp(prefix="kcp-opa-plan-", suffix=".rbb")
    with os.fdopen(fd, "wb") as handle:
        handle.write(content)
    return Path(name)
