"""The context stage: the facts a decision rests on, from the gate's sources of truth.

See :mod:`kcp_opa.context.facts` for the classes (intent, gate, attested) and
:mod:`kcp_opa.context.builder` for how ``input.context.facts`` is built.
"""

from kcp_opa.context.attested import AttestationSource, SignedAttestations, sign_fact
from kcp_opa.context.builder import ContextSourceError, ContextSources, build_context
from kcp_opa.context.facts import FACTS, FactClass, FactSpec
from kcp_opa.context.sources import (
    CounterSource,
    GateConfigSource,
    PrincipalSource,
    RegistrySource,
    StaticCounters,
    StaticGateConfig,
)

__all__ = [
    "FACTS",
    "AttestationSource",
    "ContextSourceError",
    "ContextSources",
    "CounterSource",
    "FactClass",
    "FactSpec",
    "GateConfigSource",
    "PrincipalSource",
    "RegistrySource",
    "SignedAttestations",
    "StaticCounters",
    "StaticGateConfig",
    "build_context",
    "sign_fact",
]
