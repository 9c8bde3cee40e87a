# METADATA
# title: Action completeness and tool binding
# description: |
#   The gate's Python side refuses malformed actions before evaluation; this evaluator makes
#   the policy fail closed on its own, for any caller (an `opa eval` replay, another gate):
#   an input without the action facts the rules read is denied, never silently allowed.
#   Once the matrix lists each task type's tools (`requested_actions`), an action whose
#   requested_action its task type does not list is denied: the receipt runs the handler bound
#   to the requested_action, so a `read` naming `execute_payment` would otherwise run a payment.
# custom:
#   evaluator_id: action_complete_check
#   evaluator_version: "1.1.0"
package kcp.evaluators.action

import rego.v1

_required := {"tenant_id", "subject_id", "agent_id", "action_type", "requested_action", "target.type"}

# The required facts the action gives as strings. Collected positively and subtracted as sets:
# `not f(x)` per field cost regopy a function call each (docs/engine-findings.md item 20), and
# `not is_string(undefined)` differs between the engines (item 11).
_present contains name if {
	some name in _required
	is_string(input.action[name])
}

_present contains "target.type" if is_string(input.action.target.type)

# METADATA
# title: Missing action facts
# description: Required action fields that are absent or not strings.
missing := _required - _present

# METADATA
# title: Findings
# custom:
#   requires: [input.action.tenant_id, input.action.subject_id, input.action.agent_id, input.action.action_type,
#      input.action.requested_action, input.action.target.type]
#   absent: "action_incomplete (this rule: absent is the finding)"
findings contains finding if {
	count(missing) > 0
	# concat, not sprintf("%v", [concat(..)]): regopy quotes a computed string inside
	# sprintf output without escaping it (docs/engine-findings.md item 13).
	text1 := concat("", ["the action lacks ", concat(", ", sort(missing)), "; nothing can be decided without them"])
	finding := {
		"code": "action_incomplete",
		"rule": "kcp.action.complete",
		"state": "DENY",
		"controls": [],
		"message": text1,
		"details": {"fields": sort(missing)},
	}
}

# Task type -> the tools it may request; empty when the matrix binds no tool to a task type.
_tools := data.kcp_data.matrix.requested_actions

# Collected positively: `not` over an undefined value differs between the engines
# (docs/engine-findings.md items 7 and 29).
_listed if {
	some tool in _tools[input.action.action_type]
	tool == input.action.requested_action
}

# METADATA
# title: Tool bound to its task type
# description: DENY when the matrix lists tools per task type and the action's task type does not list its tool.
# custom:
#   requires: [input.action.action_type, input.action.requested_action]
#   absent: "action_incomplete (a missing action_type or requested_action is denied above)"
findings contains finding if {
	count(_tools) > 0
	is_string(input.action.action_type)
	is_string(input.action.requested_action)
	not _listed
	text1 := concat("", [
		"requested_action ", input.action.requested_action, " is not among the tools the matrix lists for task type ",
		input.action.action_type, "; the receipt would run that tool's handler",
	])
	finding := {
		"code": "requested_action_not_in_task_type",
		"rule": "kcp.action.requested_in_task_type",
		"state": "DENY",
		"controls": [],
		"message": text1,
		"details": {"fields": ["data.kcp_data.matrix.requested_actions"]},
	}
}
