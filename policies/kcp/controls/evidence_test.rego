package kcp.controls_test

import rego.v1

import data.kcp.controls

_action := {
	"subject_id": "user_001", "agent_id": "agent_payments_001",
	"authorization_context": {"requested_by": "user_001", "agent_scope": []},
	"delegation_chain": [{"agent_id": "orchestrator", "capabilities": []}],
}

_required := ["independent_human_approval", "user_confirmation", "identity_verification", "standard_audit_logging"]

_verdict(evidence) := v if {
	action := _action
	required := _required
	v := controls.verdict with input.evidence as evidence with input.action as action with input.required_controls as required
}

test_human_approver_accepted if {
	_verdict({"control": "independent_human_approval", "status": "PASSED", "actor_type": "human", "actor_id": "approver_7"}).accepted
}

test_ai_agent_cannot_approve if {
	v := _verdict({"control": "independent_human_approval", "status": "PASSED", "actor_type": "ai_agent", "actor_id": "bot"})
	v.code == "agent_cannot_satisfy_human_control"
}

test_ai_agent_cannot_confirm_for_the_user if {
	v := _verdict({"control": "user_confirmation", "status": "PASSED", "actor_type": "ai_agent", "actor_id": "bot"})
	v.code == "agent_cannot_satisfy_human_control"
}

test_subject_cannot_approve_own_action if {
	v := _verdict({"control": "independent_human_approval", "status": "PASSED", "actor_type": "human", "actor_id": "user_001"})
	v.code == "self_approval"
}

test_delegating_agent_cannot_approve if {
	v := _verdict({"control": "independent_human_approval", "status": "PASSED", "actor_type": "human", "actor_id": "orchestrator"})
	v.code == "self_approval"
}

test_unknown_control if {
	v := _verdict({"control": "vibes_check", "status": "PASSED", "actor_type": "human", "actor_id": "a"})
	v.code == "unknown_control"
}

test_control_not_required if {
	v := _verdict({"control": "compliance_review", "status": "PASSED", "actor_type": "human", "actor_id": "a"})
	v.code == "control_not_required"
}

test_a_passed_check_satisfies_only_its_control if {
	v := _verdict({"control": "identity_verification", "status": "PASSED", "actor_type": "user", "actor_id": "user_001"})
	v.code == "actor_type_not_allowed"
}

test_system_logs_audit if {
	_verdict({"control": "standard_audit_logging", "status": "PASSED", "actor_type": "system", "actor_id": "kcp-opa"}).accepted
}

test_malformed_status_refused if {
	not _verdict({"control": "user_confirmation", "status": "OK", "actor_type": "user", "actor_id": "u"}).accepted
}
