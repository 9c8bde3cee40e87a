package kcp.evaluators.financial_test

import rego.v1

import data.kcp.evaluators.financial

_matrix := {"parameters": {"money": {"high_value_minor": {"USD": 500000}}}}

_kya := {
	"action_type": "cross_border_payment", "requested_action": "execute_payment",
	"amount": {"value_minor": 800000, "currency": "USD"},
	"authorization_context": {"requested_by": "user_001", "agent_scope": ["prepare_payment", "execute_payment"]},
	"attributes": {"new_beneficiary": true, "high_risk_country": false},
}

test_kya_supplier_payment_controls if {
	m := _matrix
	action := _kya
	controls := {c | some f in financial.findings; some c in f.controls}
		with input.action as action
		with data.kcp_data.matrix as m
	controls == {
		"user_confirmation",
		"identity_verification",
		"authority_verification",
		"beneficiary_verification",
		"independent_human_approval",
	}
}

test_below_threshold_known_beneficiary if {
	m := _matrix
	action := json.patch(_kya, [
		{"op": "replace", "path": "/amount/value_minor", "value": 4999},
		{"op": "replace", "path": "/attributes/new_beneficiary", "value": false},
	])
	granted := _granted(action)
	{f.code | some f in financial.findings} == {"value_transfer"}
		with input.action as action
		with input.context.facts as granted
		with data.kcp_data.matrix as m
}

test_unknown_currency_counts_as_high_value if {
	m := _matrix
	action := json.patch(_kya, [{"op": "replace", "path": "/amount/currency", "value": "JPY"}])
	financial.high_value with input.action as action with data.kcp_data.matrix as m
}

test_payment_without_amount_denied if {
	m := _matrix
	some f in financial.findings
		with input.action as {"action_type": "payment", "requested_action": "pay"}
		with data.kcp_data.matrix as m
	f.code == "amount_missing"
	f.state == "DENY"
}

test_scope_not_covering_requires_authority if {
	m := _matrix
	action := json.patch(_kya, [{"op": "replace", "path": "/requested_action", "value": "wire_everything"}])
	some f in financial.findings with input.action as action with data.kcp_data.matrix as m
	f.code == "scope_does_not_cover_action"
}

test_a_stated_scope_the_gate_did_not_grant_covers_nothing if {
	m := _matrix
	action := json.patch(_kya, [
		{"op": "replace", "path": "/amount/value_minor", "value": 4999},
		{"op": "replace", "path": "/attributes/new_beneficiary", "value": false},
	])
	# The gate granted no scope: the stated one, which covers the action, does not lift the finding.
	"scope_does_not_cover_action" in {f.code | some f in financial.findings}
		with input.action as action
		with data.kcp_data.matrix as m
	granted := _granted(action)
	not "scope_does_not_cover_action" in {f.code | some f in financial.findings}
		with input.action as action
		with input.context.facts as granted
		with data.kcp_data.matrix as m
}

test_screening_uncertainty_is_compliance_review if {
	m := _matrix
	action := json.patch(_kya, [{"op": "add", "path": "/attributes/screening_uncertain", "value": true}])
	some f in financial.findings with input.action as action with data.kcp_data.matrix as m
	f.state == "COMPLIANCE_REVIEW"
	f.controls == ["compliance_review", "safe_stop"]
}

test_withdrawal_and_step_up if {
	m := _matrix
	action := {
		"action_type": "withdrawal",
		"requested_action": "withdraw",
		"amount": {"value_minor": 100, "currency": "USD"},
		"authorization_context": {"agent_scope": ["withdraw"]},
		"attributes": {"new_device": true},
	}
	granted := _granted(action)
	codes := {f.code | some f in financial.findings}
		with input.action as action
		with input.context.facts as granted
		with data.kcp_data.matrix as m
	codes == {"value_transfer", "identity_verification_required", "step_up_required"}
}

test_reading_moves_no_money if {
	m := _matrix
	count(financial.findings) == 0 with input.action as {"action_type": "read"} with data.kcp_data.matrix as m
}

_high_value_message(action, m) := msg if {
	some f in financial.findings with input.action as action with data.kcp_data.matrix as m
	f.code == "high_value"
	msg := f.message
}

test_high_value_message_prints_major_units_and_the_threshold if {
	m := {"parameters": {"money": {"high_value_minor": {"EUR": 500000, "USD": 500000, "JPY": 100000, "KWD": 5000}}}}
	eur := json.patch(_kya, [{"op": "replace", "path": "/amount", "value": {"value_minor": 750000, "currency": "EUR"}}])
	_high_value_message(eur, m) == "7500.00 EUR is at or above the high-value threshold of 5000.00 EUR"
	cents := json.patch(_kya, [
		{"op": "replace", "path": "/amount", "value": {"value_minor": 12345678905, "currency": "USD"}},
	])
	_high_value_message(cents, m) == "123456789.05 USD is at or above the high-value threshold of 5000.00 USD"
	yen := json.patch(_kya, [{"op": "replace", "path": "/amount", "value": {"value_minor": 250000, "currency": "JPY"}}])
	_high_value_message(yen, m) == "250000 JPY is at or above the high-value threshold of 100000 JPY"
	dinar := json.patch(_kya, [{"op": "replace", "path": "/amount", "value": {"value_minor": 5000, "currency": "KWD"}}])
	_high_value_message(dinar, m) == "5.000 KWD is at or above the high-value threshold of 5.000 KWD"
}

test_high_value_message_without_a_threshold if {
	m := {"parameters": {"money": {"high_value_minor": {"small": 1}}}}
	action := json.patch(_kya, [{"op": "replace", "path": "/amount", "value": {"value_minor": 5, "currency": "CHF"}}])
	_high_value_message(action, m) == "0.05 CHF is high value: no high-value threshold is set for CHF"
}

# A claims desk: reimbursements move money, reads do not; a supervisor only from 1,000.00 EUR.
_claims := {"parameters": {
	"money": {"high_value_minor": {"EUR": 100000}},
	"money_moving_task_types": ["reimbursement"],
	"money_controls_by_task_type": {"reimbursement": {
		"value_transfer": "none",
		"high_value": ["independent_human_approval"],
	}},
}}

_reimbursement(minor) := {
	"action_type": "reimbursement", "requested_action": "claims.reimburse",
	"amount": {"value_minor": minor, "currency": "EUR"},
	"authorization_context": {"agent_scope": ["claims.reimburse"]},
}

_claims_granted := {"agent_scope": {"value": ["claims.reimburse"]}}

# code -> {state, controls} of every finding for ACTION under matrix M.
_routed(action, m) := out if {
	granted := _granted(action)
	out := {f.code: object.filter(f, ["state", "controls"]) | some f in financial.findings}
		with input.action as action
		with input.context.facts as granted
		with data.kcp_data.matrix as m
}

# The gate grants the scope the action states: these tests route money, not the scope check (a
# scope the gate did not grant is the empty one, whatever is stated).
_granted(action) := {"agent_scope": {"value": object.get(action, ["authorization_context", "agent_scope"], [])}}

test_declared_types_only_move_money if {
	m := _claims
	read := {"action_type": "read", "requested_action": "claims.get", "amount": {"value_minor": 500, "currency": "EUR"}}
	_routed(read, m) == {"amount_on_non_money_action": {"state": "DENY", "controls": []}}
	not financial.value_transfer with input.action as read with data.kcp_data.matrix as m
	financial.value_transfer with input.action as _reimbursement(500) with data.kcp_data.matrix as m
}

test_any_amount_on_a_moneyless_type_is_denied if {
	m := _claims
	some amount in [{}, {"value_minor": 0, "currency": "EUR"}, 5, false, "EUR 5", []]
	action := {"action_type": "read", "requested_action": "claims.get", "amount": amount}
	_routed(action, m) == {"amount_on_non_money_action": {"state": "DENY", "controls": []}}
}

test_a_built_in_money_type_the_matrix_does_not_list_is_no_value_transfer if {
	m := _claims
	action := json.patch(_kya, [{"op": "replace", "path": "/amount/currency", "value": "EUR"}])
	codes := {f.code | some f in financial.findings} with input.action as action with data.kcp_data.matrix as m
	codes == {"amount_on_non_money_action", "new_beneficiary"}
	not financial.high_value with input.action as action with data.kcp_data.matrix as m
}

test_no_amount_no_finding_on_a_moneyless_type if {
	m := _claims
	count(financial.findings) == 0
		with input.action as {"action_type": "read", "requested_action": "claims.get"}
		with data.kcp_data.matrix as m
	count(financial.findings) == 0
		with input.action as {"action_type": "read", "requested_action": "claims.get", "amount": null}
		with data.kcp_data.matrix as m
}

test_undeclared_any_positive_amount_is_a_value_transfer if {
	m := _matrix
	action := {
		"action_type": "read", "requested_action": "r", "amount": {"value_minor": 5, "currency": "USD"},
		"authorization_context": {"agent_scope": ["r"]},
	}
	_routed(action, m) == {"value_transfer": {"state": "USER_CONFIRMATION", "controls": ["user_confirmation"]}}
}

test_a_declared_type_without_amount_is_denied if {
	m := _claims
	action := {"action_type": "reimbursement", "requested_action": "claims.reimburse"}
	_routed(action, m).amount_missing == {"state": "DENY", "controls": []}
}

test_controls_by_task_type_below_and_above_the_threshold if {
	m := _claims
	_routed(_reimbursement(99999), m) == {"value_transfer": {"state": "ALLOW", "controls": []}}
	_routed(_reimbursement(100000), m) == {
		"value_transfer": {"state": "ALLOW", "controls": []},
		"high_value": {"state": "HUMAN_APPROVAL", "controls": ["independent_human_approval"]},
	}
	some f in financial.findings
		with input.action as _reimbursement(500)
		with input.context.facts as _claims_granted
		with data.kcp_data.matrix as m
	f.message == "value transfer: the matrix sets no control for task type reimbursement"
}

test_a_declared_set_routes_to_its_strongest_control if {
	m := json.patch(_claims, [{
		"op": "replace", "path": "/parameters/money_controls_by_task_type/reimbursement",
		"value": {"value_transfer": ["step_up_authentication", "identity_verification"]},
	}])
	_routed(_reimbursement(100000), m) == {
		"value_transfer": {
			"state": "IDENTITY_VERIFICATION",
			"controls": ["step_up_authentication", "identity_verification"],
		},
		"high_value": {
			"state": "HUMAN_APPROVAL",
			"controls": ["authority_verification", "identity_verification", "independent_human_approval"],
		},
	}
	some f in financial.findings
		with input.action as _reimbursement(5)
		with input.context.facts as _claims_granted
		with data.kcp_data.matrix as m
	f.message == concat("", [
		"value transfer: the matrix sets the controls for task type reimbursement: ",
		"step_up_authentication, identity_verification",
	])
}

test_a_review_in_a_declared_set_is_an_approval_never_a_hold if {
	m := json.patch(_claims, [{
		"op": "replace", "path": "/parameters/money_controls_by_task_type/reimbursement/high_value",
		"value": ["compliance_review"],
	}])
	_routed(_reimbursement(100000), m).high_value == {"state": "HUMAN_APPROVAL", "controls": ["compliance_review"]}
}

test_an_empty_declared_set_keeps_the_defaults if {
	m := json.patch(_claims, [{
		"op": "replace", "path": "/parameters/money_controls_by_task_type/reimbursement",
		"value": {"value_transfer": [], "high_value": "nothing"},
	}])
	_routed(_reimbursement(100000), m) == {
		"value_transfer": {"state": "USER_CONFIRMATION", "controls": ["user_confirmation"]},
		"high_value": {
			"state": "HUMAN_APPROVAL",
			"controls": ["authority_verification", "identity_verification", "independent_human_approval"],
		},
	}
}

test_controls_of_one_task_type_leave_the_others_their_defaults if {
	m := json.patch(_claims, [{
		"op": "replace", "path": "/parameters/money_moving_task_types",
		"value": ["reimbursement", "payment"],
	}])
	action := {
		"action_type": "payment", "requested_action": "pay", "amount": {"value_minor": 5, "currency": "EUR"},
		"authorization_context": {"agent_scope": ["pay"]},
	}
	_routed(action, m) == {"value_transfer": {"state": "USER_CONFIRMATION", "controls": ["user_confirmation"]}}
}
