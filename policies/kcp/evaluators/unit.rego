# METADATA
# title: Unknown unit
# description: An action that names a project or unit the deployment does not declare is denied.
# custom:
#   evaluator_id: unit_known_check
#   evaluator_version: "1.0.0"
package kcp.evaluators.unit

import rego.v1

import data.kcp.evaluators.finding
import data.kcp.lib.facts

evaluator := {"id": "unit_known_check", "version": "1.0.0"}

# METADATA
# title: Findings
# description: DENY unknown_unit when the named unit is not in the compiled deployment.
findings contains finding.new(
	evaluator, "unknown_unit", "kcp.unit.known", "DENY", [],
	text1,
	{},
) if {
	text1 := sprintf("unit %v/%v is not declared by the deployment", [input.action.knowledge.project, input.action.knowledge.unit])
	facts.knowledge_bound
	not facts.unit_known
}
