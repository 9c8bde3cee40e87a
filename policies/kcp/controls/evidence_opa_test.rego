# kcp-opa: engines=opa
# Under `with input.prior as ...` / `with input.evidence as ...` regopy leaves these verdicts
# undefined: the mock, not the policy (the verdict iterates and tests membership in mocked input
# fields, the family of docs/engine-findings.md item 17). With the same documents as real input
# both engines answer alike, pinned on both by tests/policies/test_evidence_engines.py. These tests pin
# the policy's logic on OPA, which is also what `kcp-opa mutate` runs.
package kcp.controls_test

import rego.v1

test_unreadable_evidence_falls_to_the_default_verdict if {
	v := _judge(object.union(_input("identity_verification", "kyc-provider", "bank-idp", []), {
		"evidence": {"status": "OK"},
	}))
	v == {"accepted": false, "code": "evidence_unreadable", "message": "the evidence could not be judged"}
}

test_satisfied_lists_the_passed_controls_without_a_failed_one if {
	prior := [
		{"control": "identity_verification", "status": "PASSED"},
		{"control": "user_confirmation", "status": "FAILED"},
	]
	v := _verdict("independent_human_approval", "treasury_approver_anna", "approval-app", prior)
	v.accepted
	v.satisfied == ["identity_verification", "independent_human_approval"]
}

test_a_failed_after_a_passed_leaves_the_control_unsatisfied if {
	prior := [
		{"control": "identity_verification", "status": "PASSED"},
		{"control": "identity_verification", "status": "FAILED"},
	]
	v := _verdict("independent_human_approval", "treasury_approver_anna", "approval-app", prior)
	v.accepted
	v.satisfied == ["independent_human_approval"]
}

test_only_a_passed_result_satisfies if {
	prior := [{"control": "identity_verification", "status": "PENDING"}]
	v := _verdict("independent_human_approval", "treasury_approver_anna", "approval-app", prior)
	v.satisfied == ["independent_human_approval"]
}
