"""The context stage: the facts a decision rests on, from the gate's sources of truth.

See :mod:`kcp_opa.context.facts` for the classes (intent, gate, attested) and
:mod:`kcp_opa.context.builder` for how ``input.context.facts`` is built.
"""

from kcp_opa.context.attested import AttestationSource, SignedAttestations, sign_fact
from kcp_opa.context.builder import ContextSourceError, ContextSources, build_context
from kcp_opa.context.exceptionsource import ExceptionSource, SignedExceptions
from kcp_opa.context.factcontract import GateFactError
from kcp_opa.context.facts import FACTS, FactClass, FactSpec
from kcp_opa.context.factsources import (
    CounterSource,
    GateConfigSource,
    PrincipalSource,
    RegistrySource,
    StaticCounters,
    StaticGateConfig,
)
from kcp_opa.context.metering import METERED_SPEND, MeteringSource, sign_spend

__all__ = [
    "FACTS",
    "METERED_SPEND",
    "AttestationSource",
    "ContextSourceError",
    "ContextSources",
    "CounterSource",
    "ExceptionSource",
    "FactClass",
    "FactSpec",
    "GateConfigSource",
    "GateFactError",
    "MeteringSource",
    "PrincipalSource",
    "RegistrySource",
    "SignedAttestations",
    "SignedExceptions",
    "StaticCounters",
    "StaticGateConfig",
    "build_context",
    "sign_fact",
    "sign_spend",
]
