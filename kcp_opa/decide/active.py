"""The bundle a gate decides with at one moment: its engines, policy version and audit trail.

A decision runs wholly on one ``ActiveBundle``; swapping bundles replaces the whole object.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from kcp_opa.compile.bundle import LoadedBundle
from kcp_opa.core.jsonread import JsonObject
from kcp_opa.decide.crosscheck import OpaReference
from kcp_opa.decide.engine import Evaluator
from kcp_opa.trail.entries import AuditTrail


@dataclass(frozen=True)
class ActiveBundle:
    """One loaded bundle with its engines and audit trail: what a decision runs on, whole."""

    bundle: LoadedBundle
    engine: Evaluator
    reference: OpaReference | None
    policy_version: str
    audit: AuditTrail | None
    activated_at: str
    #: The matrix parameters the gate counts for (budgets, velocity), read once at load.
    counting: JsonObject


def utc_now() -> str:
    """Now, as the ledger writes times (whole seconds, UTC)."""
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
