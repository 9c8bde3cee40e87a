# METADATA
# title: Unknown unit
# description: An action that names a project or unit the deployment does not declare is denied.
# custom:
#   evaluator_id: unit_known_check
#   evaluator_version: "1.0.0"
package kcp.evaluators.unit

import rego.v1

import data.kcp.lib.facts

evaluator := {"id": "unit_known_check", "version": "1.0.0"}

# METADATA
# title: Findings
# description: DENY unknown_unit when the named unit is not in the compiled deployment.
findings contains {
	"code": "unknown_unit",
	"rule": "kcp.unit.known",
	"evaluator_id": "unit_known_check",
	"evaluator_version": "1.0.0",
	"state": "DENY",
	"controls": [],
	"message": text1,
	"details": {},
} if {
	facts.knowledge_bound
	not facts.unit_known
	text1 := sprintf("unit %v/%v is not declared by the deployment", [input.action.knowledge.project, input.action.knowledge.unit])
}
