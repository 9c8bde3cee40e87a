# kcp-opa: engines=opa
# Reaching the default decision needs a rule mocked with `with data.kcp.lib.routing.properties
# as ...`, which regopy ignores (docs/engine-findings.md); no decision case can reach it either
# (docs/decision-cases.md). This pins the fail-closed default document, field by field.
package kcp.gate.default_test

import rego.v1

import data.kcp.gate

test_an_undefined_decision_falls_to_the_closed_deny if {
	properties := {}
	action := {"tenant_id": "t"}
	context := {"satisfied_controls": ["standard_audit_logging"]}
	d := gate.decision
		with data.kcp.lib.routing.properties as properties
		with input.action as action
		with input.context as context
	d == {
		"decision": "DENY",
		"outcome": "deny",
		"authorization_status": "DENIED",
		"execution_allowed": false,
		"risk_level": "CRITICAL",
		"required_controls": [],
		"satisfied_controls": [],
		"missing_controls": [],
		"reasons": [
			{
				"code": "policy_undefined",
				"rule": "kcp.gate.default",
				"evaluator_id": "kcp_gate",
				"evaluator_version": "1.0.0",
				"message": "the policy produced no decision; failing closed",
			},
		],
		"reason_codes": ["policy_undefined"],
		"violations": [],
		"obligations": ["audit"],
		"approver_roles": [],
	}
}
