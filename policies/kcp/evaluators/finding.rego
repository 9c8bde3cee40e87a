# METADATA
# title: Finding shape
# description: |
#   One constructor for every evaluator's findings, so both engines see objects with the
#   same keys and the gate can merge them without knowing who produced them.
package kcp.evaluators.finding

import rego.v1

# METADATA
# title: A finding
# description: |
#   `rule` names the policy rule, `state` the routing state it asks for, `controls` the
#   controls it requires, `details` evaluator specifics (e.g. violating fields).
new(evaluator, code, rule, state, controls, message, details) := {
	"code": code,
	"rule": rule,
	"evaluator_id": evaluator.id,
	"evaluator_version": evaluator.version,
	"state": state,
	"controls": sort(controls),
	"message": message,
	"details": details,
}
