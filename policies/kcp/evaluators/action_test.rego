package kcp.evaluators.action_test

import rego.v1

import data.kcp.evaluators.action

_complete := {
	"tenant_id": "t", "subject_id": "s", "agent_id": "a", "action_type": "read",
	"requested_action": "crm.get", "target": {"type": "customer_record", "reference": "c"},
}

test_complete_action_has_no_finding if {
	complete := _complete
	count(action.findings) == 0 with input.action as complete
}

test_missing_tenant_is_denied if {
	partial := object.remove(_complete, ["tenant_id"])
	found := action.findings with input.action as partial
	some f in found
	f.code == "action_incomplete"
	f.state == "DENY"
	_same(f.details.fields, ["tenant_id"])
}

test_no_action_at_all_is_denied if {
	some f in action.findings
	_same(f.details.fields, ["action_type", "agent_id", "requested_action", "subject_id", "target.type", "tenant_id"])
}

test_non_string_field_counts_as_missing if {
	odd := object.union(_complete, {"action_type": 7, "target": {"type": null}})
	found := action.findings with input.action as odd
	some f in found
	_same(f.details.fields, ["action_type", "target.type"])
}

# Element-wise: regopy cannot index or compare an array that sort() made from a set
# (docs/engine-findings.md item 16); iteration works on both engines.
_same(got, want) if {
	count(got) == count(want)
	[x | some x in got] == want
}

# A local, not a rule: regopy ignores `with data.x as <rule>` (docs/engine-findings.md item 3).
test_unlisted_tool_for_task_type_is_denied if {
	tools := {"read": ["crm.get"], "payment": ["execute_payment"]}
	odd := object.union(_complete, {"requested_action": "execute_payment"})
	found := action.findings with input.action as odd with data.kcp_data.matrix.requested_actions as tools
	some f in found
	f.code == "requested_action_not_in_task_type"
	f.state == "DENY"
}

test_listed_tool_has_no_finding if {
	tools := {"read": ["crm.get"], "payment": ["execute_payment"]}
	complete := _complete
	count(action.findings) == 0 with input.action as complete with data.kcp_data.matrix.requested_actions as tools
}

test_task_type_without_tools_is_denied_once_the_matrix_binds if {
	tools := {"read": ["crm.get"], "payment": ["execute_payment"]}
	odd := object.union(_complete, {"action_type": "refund"})
	found := action.findings with input.action as odd with data.kcp_data.matrix.requested_actions as tools
	some f in found
	f.code == "requested_action_not_in_task_type"
}

test_matrix_without_tools_binds_nothing if {
	odd := object.union(_complete, {"requested_action": "execute_payment"})
	count(action.findings) == 0 with input.action as odd with data.kcp_data.matrix.requested_actions as {}
}
