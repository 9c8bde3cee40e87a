# The control table of the contract (section 5), pinned whole: which actor kinds may satisfy
# which control, and which controls only a person can satisfy. The verdicts at its edges
# (the subject confirming, an unreadable status, an unknown principal) are in evidence_test.rego.
package kcp.controls.contract_test

import rego.v1

import data.kcp.controls

test_the_actor_table_is_the_contract if {
	controls.allowed_actors == {
		"standard_audit_logging": {"system"},
		"user_confirmation": {"user"},
		"step_up_authentication": {"user"},
		"identity_verification": {"provider", "human", "user"},
		"authority_verification": {"system", "provider", "human"},
		"beneficiary_verification": {"system", "provider", "human"},
		"independent_human_approval": {"human"},
		"compliance_review": {"human"},
		"safe_stop": {"system", "human"},
	}
}

test_without_a_registry_the_human_controls_are_the_base_four if {
	controls.human_controls == {
		"user_confirmation",
		"step_up_authentication",
		"independent_human_approval",
		"compliance_review",
	}
}
