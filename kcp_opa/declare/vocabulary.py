"""KCP vocabularies (kcp-manifest.md). Closed ones are enforced by the JSON Schemas; open ones
only warn, so that a typo such as ``no_ai_training`` is visible without rejecting the file."""

from __future__ import annotations

import re

KNOWN_KCP_VERSIONS = frozenset(
    {
        "0.1",
        "0.2",
        "0.3",
        "0.4",
        "0.5",
        "0.6",
        "0.7",
        "0.8",
        "0.9",
        "0.10",
        "0.11",
        "0.12",
        "0.13",
        "0.14",
        "0.16",
        "0.17",
        "0.18",
        "0.19",
        "0.20",
        "0.21",
        "0.22",
        "0.23",
        "0.24",
        "0.25",
        "0.26",
        "0.27",
        "0.28",
        "0.29",
        "0.30",
    }
)  # 0.15 was never published (the KCP changelog skips it)

# Closed vocabularies (a bad value is an error; the schemas carry the same lists).
SENSITIVITY_ORDER = ("public", "internal", "confidential", "restricted")
SCOPES = ("global", "project", "module")
APPROVAL_MECHANISMS = ("oauth_consent", "uma", "custom")
ON_STALE = ("warn", "degrade", "block")
LEGAL_BASES = (
    "consent",
    "explicit_consent",
    "contract",
    "legal_obligation",
    "vital_interests",
    "public_task",
    "legitimate_interests",
)
AUTONOMY_LEVELS = ("autonomous", "confirm", "approve", "forbidden")

# Open vocabularies (an unknown value is a warning).
REGULATIONS = (
    "GDPR",
    "ePrivacy",
    "NIS2",
    "HIPAA",
    "HITECH",
    "CCPA",
    "MiFID2",
    "DORA",
    "AML5D",
    "FATF",
    "ITAR",
    "eIDAS",
    "EAR",
    "EU-AI-Act",
    "SOC2",
    "ISO27001",
    "NIST-AI-RMF",
)
RESTRICTIONS = (
    "no-external-llm",
    "no-logging",
    "no-cross-border",
    "no-ai-training",
    "audit-required",
    "human-approval-required",
    "no-caching",
    "no-redistribution",
    "encryption-at-rest-required",
    "anonymisation-required",
)
REGIONS = ("EEA", "EU", "US", "UK", "NO", "CH", "AU", "global")
KINDS = ("knowledge", "schema", "service", "policy", "executable")
AUDIENCES = ("human", "agent", "developer", "architect", "operator", "devops")
ACCESS_LEVELS = ("public", "authenticated", "restricted")
# Open vocabularies the spec says to ignore when unknown (a warning, never an error).
AUTH_METHOD_TYPES = ("none", "oauth2", "api_key", "bearer_token", "spiffe", "did", "http_signature")
MANIFEST_RELATIONSHIPS = ("child", "foundation", "governs", "peer", "archive")
ON_FAILURE = ("skip", "warn", "degrade")
RELATIONSHIP_TYPES = ("enables", "context", "supersedes", "contradicts", "depends_on", "governs")
DATA_CATEGORIES = (
    "personal",
    "contact",
    "financial",
    "health",
    "biometric",
    "genetic",
    "location",
    "behavioural",
    "special_category",
    "criminal",
    "children",
    "credentials",
    "public",
)
TASK_TYPES = (
    "read",
    "write",
    "send",
    "refund",
    "remember",
    "answer",
    "payment",
    "withdrawal",
    "cross_border_payment",
    "retrieve",
    "delete",
    "tool_call",
)

UNIT_ID_PATTERN = re.compile(r"^[a-z0-9.\-]+$")
ISO_ALPHA2 = re.compile(r"^[A-Z]{2}$")


def sensitivity_rank(level: str | None) -> int:
    """0..3 for public..restricted; -1 for undeclared (unknown is not public)."""
    return SENSITIVITY_ORDER.index(level) if level in SENSITIVITY_ORDER else -1


# -- what reads each declared value (issue 26: every declaration is enforced or refused) --------
#: The policies hold the same table (policies/kcp/lib/declarations.rego, ``table``), checked
#: against this one and against the rules it names by tests/policies/test_declaration_table.py. A value
#: read by ``REFUSED`` is a validation error (nothing decides on it); by ``ADVISORY`` it is
#: recorded (bundle, ROPA, explain) and warned about, never decided on.
REFUSED = "refused"
ADVISORY = "advisory"
RESTRICTION_RULES = {
    "no-external-llm": "kcp.restrictions.no-external-llm",
    "no-logging": "kcp.gate.obligations",
    "no-cross-border": "kcp.restrictions.no-cross-border",
    "no-ai-training": "kcp.restrictions.no-ai-training",
    "audit-required": "kcp.gate.obligations",
    "human-approval-required": "kcp.restrictions.human-approval-required",
    "no-caching": REFUSED,
    "no-redistribution": REFUSED,
    "encryption-at-rest-required": REFUSED,
    "anonymisation-required": REFUSED,
}

READ_BY: dict[str, dict[str, str]] = {
    "restrictions": RESTRICTION_RULES,
    "regulations": dict.fromkeys(REGULATIONS, ADVISORY),
    "legal_basis": dict.fromkeys(LEGAL_BASES, ADVISORY),
    "conditions": {"environment": "kcp.lib.visibility", "agent_role": "kcp.lib.visibility"},
    "sensitivity": dict.fromkeys(SENSITIVITY_ORDER, "kcp.matrix.cell"),
    "data_categories": dict.fromkeys(DATA_CATEGORIES, "kcp.matrix.cell"),
    "regions": dict.fromkeys(REGIONS, "kcp.compliance.data_residency"),
    "access": dict.fromkeys(ACCESS_LEVELS, "kcp.access.credential"),
    "on_stale": dict.fromkeys(ON_STALE, "kcp.freshness_policy"),
    "approval_mechanism": dict.fromkeys(APPROVAL_MECHANISMS, "kcp.restrictions.human-approval-required"),
    "autonomy": dict.fromkeys(AUTONOMY_LEVELS, "kcp.matrix.cell"),
}
