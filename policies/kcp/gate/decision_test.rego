# kcp-opa: engines=opa
# regopy does not finish planning the whole gate under `with data.kcp_data as ...` (this
# file's tests in one child: no result after 300 s, measured 2026-11-30; docs/engine-findings.md,
# item 12). The gate runs on both engines against compiled bundles in tests/decide/test_gate_cases.py
# and in every decision case (fixtures/cases); these tests pin its logic on OPA.
package kcp.gate_test

import rego.v1

import data.kcp.gate

_units := {
	"depth": 0,
	"count": 1,
	"slots": {"p": {"u": {"profile": 0, "validated": "1970-04-11", "validated_epoch_day": 100}}},
}

_profiles := [{
	"sensitivity": "internal",
	"compliance": {
		"data_residency": null,
		"restrictions": ["audit-required"],
		"declared_fields": ["email"],
		"data_categories": [],
	},
	"delegation": {
		"max_depth": null,
		"require_capability_attenuation": false,
		"audit_chain": false,
		"human_in_the_loop": {"required": false},
	},
	"trust": {"agent_must_log": false, "require_trace_context": false},
	"freshness": null,
	"effective_visibility": {"needs": [], "cells": {"": {"": _internal}}, "incomplete": _internal},
}]

# The compiled form of the flat sensitivity (kcp_opa/declare/governance.py visibility_cells).
_internal := {
	"sensitivity": "internal",
	"requires_auth": false,
	"condition": null,
	"source": "flat sensitivity (no visibility block)",
}

_cells := {
	"depth": 0,
	"count": 2,
	"slots": {"read": {"sensitivity": {"internal": "autonomous"}}, "send": {"sensitivity": {"internal": "confirm"}}},
}

_matrix := {"task_types": ["read", "send", "refund"], "parameters": {
	"money": {"high_value_minor": {}},
	"approver_roles": {"default": "lead", "by_task_type": {"refund": "finance_reviewer"}},
	"sender_roles": ["support_agent"],
}}

_data := {"units": _units, "profiles": _profiles, "tasks": _cells, "matrix": _matrix}

_read := {
	"tenant_id": "t", "subject_id": "s", "agent_id": "a", "action_type": "read", "requested_action": "crm.read",
	"target": {"type": "customer_record", "tenant_id": "t"},
	"knowledge": {"project": "p", "unit": "u", "fields_read": ["email"]},
	"runtime": {"risk_level": "low", "evidence_status": "present", "budget_state": "within_budget"},
}

# The decision time and the action's creation time (five minutes earlier), as the gate builds them.
_clock := {
	"decision_epoch_seconds": 1764410400,
	"decision_epoch_day": 20421,
	"action_created_epoch_seconds": 1764410100,
	"facts": {
		"evidence_status": {"value": "present", "class": "attested", "source": "test"},
		"deployment_region": {"value": "EU", "class": "gate", "source": "test"},
	},
}

test_clean_read_is_allowed_pending_audit_logging if {
	c := _clock
	kd := _data
	action := _read
	d := gate.decision with input.action as action with input.context as c with data.kcp_data as kd
	d.decision == "ALLOW"
	d.outcome == "allow"
	d.reason_codes == ["policy_passed"]
	d.required_controls == ["standard_audit_logging"]
	d.authorization_status == "PENDING_CONTROLS"
	d.obligations == ["audit"]
}

test_satisfied_audit_logging_approves if {
	c := _clock
	kd := _data
	action := _read
	ctx := object.union(_clock, {"satisfied_controls": ["standard_audit_logging", "user_confirmation"]})
	d := gate.decision with input.action as action with input.context as ctx with data.kcp_data as kd
	d.authorization_status == "APPROVED"
	d.execution_allowed == true
	d.satisfied_controls == ["standard_audit_logging"]
}

test_deny_is_terminal_and_lists_every_reason if {
	kd := _data
	action := json.patch(_read, [
		{"op": "replace", "path": "/target/tenant_id", "value": "other"},
		{"op": "replace", "path": "/action_type", "value": "refund"},
		{"op": "replace", "path": "/runtime/risk_level", "value": "high"},
	])
	d := gate.decision
		with input.action as action
		with input.context.satisfied_controls as ["standard_audit_logging", "independent_human_approval"]
		with data.kcp_data as kd
	d.decision == "DENY"
	d.authorization_status == "DENIED"
	d.execution_allowed == false
	"tenant_boundary" in d.reason_codes
	"refund_requires_review" in d.reason_codes

	# Nothing to approve, nothing missing: a DENY lists no controls and no approver.
	d.approver_roles == []
	d.required_controls == []
	d.missing_controls == []
	d.satisfied_controls == []
	d.risk_level == "HIGH"
}

# A human approval that no finding assigns goes to the matrix's approver for the task type.
_approve_cells := {"depth": 0, "count": 3, "slots": {
	"read": {"sensitivity": {"internal": "autonomous"}},
	"refund": {"sensitivity": {"internal": "approve"}},
	"payroll": {"sensitivity": {"internal": "approve"}},
}}

_payroll_matrix := {"task_types": ["read", "refund", "payroll"], "parameters": {
	"money": {"high_value_minor": {}},
	"approver_roles": {"default": "lead", "by_task_type": {"refund": "finance_reviewer", "payroll": "payroll_controller"}},
	"sender_roles": [],
}}

test_matrix_approval_names_the_task_types_approver if {
	c := _clock
	kd := object.union(_data, {"tasks": _approve_cells, "matrix": _payroll_matrix})
	action := json.patch(_read, [{"op": "replace", "path": "/action_type", "value": "payroll"}])
	d := gate.decision with input.action as action with input.context as c with data.kcp_data as kd
	d.decision == "HUMAN_APPROVAL"
	"independent_human_approval" in d.required_controls
	d.approver_roles == ["payroll_controller"]
}

test_matrix_approval_falls_back_to_the_default_approver if {
	c := _clock
	matrix := json.patch(_payroll_matrix, [{"op": "remove", "path": "/parameters/approver_roles/by_task_type/payroll"}])
	kd := object.union(_data, {"tasks": _approve_cells, "matrix": matrix})
	action := json.patch(_read, [{"op": "replace", "path": "/action_type", "value": "payroll"}])
	d := gate.decision with input.action as action with input.context as c with data.kcp_data as kd
	d.approver_roles == ["lead"]
}

test_no_human_approval_names_no_approver if {
	c := _clock
	kd := _data
	action := _read
	d := gate.decision with input.action as action with input.context as c with data.kcp_data as kd
	d.approver_roles == []
}

test_controls_accumulate if {
	c := _clock
	kd := _data
	action := json.patch(_read, [
		{"op": "replace", "path": "/action_type", "value": "send"},
		{"op": "add", "path": "/authorization_context", "value": {"actor_role": "support_agent"}},
	])
	facts := object.union(c.facts, {"actor_role": {"value": "support_agent", "class": "gate", "source": "test"}})
	d := gate.decision
		with input.action as action
		with input.context as c
		with input.context.facts as facts
		with data.kcp_data as kd
	d.decision == "USER_CONFIRMATION"
	d.required_controls == ["standard_audit_logging", "user_confirmation"]
}

test_missing_resource_tenant_escalates_never_allows if {
	c := _clock
	kd := _data
	action := json.remove(_read, ["/target/tenant_id"])
	d := gate.decision with input.action as action with input.context as c with data.kcp_data as kd
	d.decision == "ESCALATE"
	d.reason_codes == ["context_missing"]
	d.violations == [
		{"evaluator_id": "context_check", "code": "context_missing", "fields": ["input.action.target.tenant_id"]},
	]
}

test_missing_clock_escalates if {
	kd := _data
	action := _read
	d := gate.decision with input.action as action with data.kcp_data as kd
	d.decision == "ESCALATE"
	clock := {
		"input.context.decision_epoch_seconds",
		"input.context.decision_epoch_day",
		"input.context.action_created_epoch_seconds",
	}
	clock - {v.fields[0] | some v in d.violations} == set()
}

test_undefined_policy_fails_closed if {
	# No compiled data at all: the unit cannot be found, so the decision must deny.
	action := _read
	d := gate.decision with input.action as action
	d.decision == "DENY"
	d.execution_allowed == false
}
