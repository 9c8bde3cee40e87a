# METADATA
# title: Action completeness
# description: |
#   The gate's Python side refuses malformed actions before evaluation; this evaluator makes
#   the policy fail closed on its own, for any caller (an `opa eval` replay, another gate):
#   an input without the action facts the rules read is denied, never silently allowed.
# custom:
#   evaluator_id: action_complete_check
#   evaluator_version: "1.0.0"
package kcp.evaluators.action

import rego.v1

evaluator := {"id": "action_complete_check", "version": "1.0.0"}

_required := ["tenant_id", "subject_id", "agent_id", "action_type", "requested_action"]

_given(name) if is_string(input.action[name])

# METADATA
# title: Missing action facts
# description: Required action fields that are absent or not strings.
missing contains name if {
	name := _required[_]
	not _given(name)
}

missing contains "target.type" if not _target_given

_target_given if is_string(input.action.target.type)

# METADATA
# title: Findings
findings contains finding if {
	count(missing) > 0
	# concat, not sprintf("%v", [concat(..)]): regopy quotes a computed string inside
	# sprintf output without escaping it (docs/engine-findings.md item 13).
	text1 := concat("", ["the action lacks ", concat(", ", sort(missing)), "; nothing can be decided without them"])
	finding := {
		"code": "action_incomplete",
		"rule": "kcp.action.complete",
		"evaluator_id": "action_complete_check",
		"evaluator_version": "1.0.0",
		"state": "DENY",
		"controls": [],
		"message": text1,
		"details": {"fields": sort(missing)},
	}
}
