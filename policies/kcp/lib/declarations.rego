# METADATA
# title: What reads each declaration
# description: |
#   Every restriction, regulation, visibility condition and vocabulary value a manifest or matrix
#   may declare, with the rule that reads it: a finding's rule id (kcp.restrictions.no-ai-training),
#   a package (kcp.lib.visibility) or a package's rule (kcp.gate.obligations).
#   "refused": no rule reads it, so `kcp-opa validate` and `compile` refuse it (restriction_unenforced).
#   "advisory": recorded in the bundle, explain and the ROPA, never decided on (validate warns
#   advisory_declaration). kcp_opa.declare.vocabulary.READ_BY is the validator's copy;
#   tests/policies/test_declaration_table.py checks the two against each other on both engines and every
#   named rule against the policies. docs/manifest-rules.md, "What reads what".
package kcp.lib.declarations

import rego.v1

table := {
	"restrictions": {
		"no-external-llm": "kcp.restrictions.no-external-llm",
		"no-logging": "kcp.gate.obligations",
		"no-cross-border": "kcp.restrictions.no-cross-border",
		"no-ai-training": "kcp.restrictions.no-ai-training",
		"audit-required": "kcp.gate.obligations",
		"human-approval-required": "kcp.restrictions.human-approval-required",
		"no-caching": "refused",
		"no-redistribution": "refused",
		"encryption-at-rest-required": "refused",
		"anonymisation-required": "refused",
	},
	"regulations": {
		"GDPR": "advisory",
		"ePrivacy": "advisory",
		"NIS2": "advisory",
		"HIPAA": "advisory",
		"HITECH": "advisory",
		"CCPA": "advisory",
		"MiFID2": "advisory",
		"DORA": "advisory",
		"AML5D": "advisory",
		"FATF": "advisory",
		"ITAR": "advisory",
		"eIDAS": "advisory",
		"EAR": "advisory",
		"EU-AI-Act": "advisory",
		"SOC2": "advisory",
		"ISO27001": "advisory",
		"NIST-AI-RMF": "advisory",
	},
	"legal_basis": {
		"consent": "advisory",
		"explicit_consent": "advisory",
		"contract": "advisory",
		"legal_obligation": "advisory",
		"vital_interests": "advisory",
		"public_task": "advisory",
		"legitimate_interests": "advisory",
	},
	"conditions": {
		"environment": "kcp.lib.visibility",
		"agent_role": "kcp.lib.visibility",
	},
	"sensitivity": {
		"public": "kcp.matrix.cell",
		"internal": "kcp.matrix.cell",
		"confidential": "kcp.matrix.cell",
		"restricted": "kcp.matrix.cell",
	},
	"data_categories": {
		"personal": "kcp.matrix.cell",
		"contact": "kcp.matrix.cell",
		"financial": "kcp.matrix.cell",
		"health": "kcp.matrix.cell",
		"biometric": "kcp.matrix.cell",
		"genetic": "kcp.matrix.cell",
		"location": "kcp.matrix.cell",
		"behavioural": "kcp.matrix.cell",
		"special_category": "kcp.matrix.cell",
		"criminal": "kcp.matrix.cell",
		"children": "kcp.matrix.cell",
		"credentials": "kcp.matrix.cell",
		"public": "kcp.matrix.cell",
	},
	"regions": {
		"EEA": "kcp.compliance.data_residency",
		"EU": "kcp.compliance.data_residency",
		"US": "kcp.compliance.data_residency",
		"UK": "kcp.compliance.data_residency",
		"NO": "kcp.compliance.data_residency",
		"CH": "kcp.compliance.data_residency",
		"AU": "kcp.compliance.data_residency",
		"global": "kcp.compliance.data_residency",
	},
	"access": {
		"public": "kcp.access.credential",
		"authenticated": "kcp.access.credential",
		"restricted": "kcp.access.credential",
	},
	"on_stale": {
		"warn": "kcp.freshness_policy",
		"degrade": "kcp.freshness_policy",
		"block": "kcp.freshness_policy",
	},
	"approval_mechanism": {
		"oauth_consent": "kcp.restrictions.human-approval-required",
		"uma": "kcp.restrictions.human-approval-required",
		"custom": "kcp.restrictions.human-approval-required",
	},
	"autonomy": {
		"autonomous": "kcp.matrix.cell",
		"confirm": "kcp.matrix.cell",
		"approve": "kcp.matrix.cell",
		"forbidden": "kcp.matrix.cell",
	},
}

# METADATA
# title: Refused declarations
# description: The values no rule reads, by vocabulary.
refused[vocabulary] contains value if {
	some vocabulary, values in table
	some value, rule in values
	rule == "refused"
}
