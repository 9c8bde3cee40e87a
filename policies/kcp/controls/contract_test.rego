# The control table of the contract (section 5), pinned whole: which actor types may satisfy
# which control, which controls only a person can satisfy, and the verdicts at its edges.
package kcp.controls.contract_test

import rego.v1

import data.kcp.controls

_action := {
	"subject_id": "user_001", "agent_id": "agent_payments_001",
	"authorization_context": {"requested_by": "user_001", "agent_scope": []},
}

_required := ["independent_human_approval", "user_confirmation", "identity_verification", "standard_audit_logging"]

_contract_verdict(evidence) := v if {
	action := _action
	required := _required
	v := controls.verdict with input.evidence as evidence with input.action as action with input.required_controls as required
}

test_the_actor_table_is_the_contract if {
	controls.allowed_actors == {
		"standard_audit_logging": {"system"},
		"user_confirmation": {"user"},
		"step_up_authentication": {"user", "provider"},
		"identity_verification": {"provider", "human"},
		"authority_verification": {"system", "provider", "human"},
		"beneficiary_verification": {"system", "provider", "human"},
		"independent_human_approval": {"human"},
		"compliance_review": {"human"},
		"safe_stop": {"system", "human"},
	}
	controls.human_controls == {"user_confirmation", "step_up_authentication", "independent_human_approval", "compliance_review"}
}

test_the_subject_may_confirm_its_own_action if {
	_contract_verdict({"control": "user_confirmation", "status": "PASSED", "actor_type": "user", "actor_id": "user_001"}) == {"accepted": true}
}

test_an_actor_id_that_is_no_string_is_refused if {
	v := _contract_verdict({"control": "user_confirmation", "status": "PASSED", "actor_type": "user", "actor_id": 1})
	v.accepted == false
	v.code == "evidence_unreadable"
}

test_an_unknown_status_is_unreadable if {
	_contract_verdict({"control": "user_confirmation", "status": "MAYBE", "actor_type": "user", "actor_id": "user_001"}) == {
		"accepted": false, "code": "evidence_unreadable", "message": "the evidence could not be judged",
	}
}
