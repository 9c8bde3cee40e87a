# kcp-opa: engines=opa
# The risk lib imports the budget, financial and visibility rules; regopy does not finish planning
# tests over that closure under `with data.kcp_data.matrix... as ...` (docs/engine-findings.md
# item 12). It runs on both engines over compiled bundles in fixtures/cases/budget.yaml.
package kcp.lib.risk_test

import rego.v1

import data.kcp.lib.risk

_params := {
	"money": {"high_value_minor": {"USD": 500000}, "confirmation_minor": {"USD": 50000}},
	"budgets": [],
	"velocity": [],
}

_pay(value) := {
	"tenant_id": "t",
	"action_type": "payment",
	"amount": {"value_minor": value, "currency": "USD"},
	"target": {"reference": "b"},
}

_known := {"beneficiary": {"key": "t/b", "prior_payments": 3}}

test_a_small_payment_to_a_known_beneficiary_is_low if {
	p := _params
	risk.level == "LOW"
		with input.action as _pay(100)
		with input.context.counters as _known
		with data.kcp_data.matrix.parameters as p
}

test_factors_raise_it if {
	p := _params
	risk.level == "MEDIUM"
		with input.action as _pay(60000)
		with input.context.counters as _known
		with data.kcp_data.matrix.parameters as p
	risk.level == "HIGH"
		with input.action as _pay(600000)
		with input.context.counters as _known
		with data.kcp_data.matrix.parameters as p
	first := {"beneficiary": {"key": "t/b", "prior_payments": 0}}
	risk.level == "HIGH"
		with input.action as _pay(100)
		with input.context.counters as first
		with data.kcp_data.matrix.parameters as p
	risk.level == "MEDIUM" with input.action as _pay(100) with data.kcp_data.matrix.parameters as p
	cross := object.union(_pay(100), {"action_type": "cross_border_payment"})
	risk.level == "HIGH"
		with input.action as cross
		with input.context.counters as _known
		with data.kcp_data.matrix.parameters as p
}

test_a_stated_level_only_raises_it if {
	p := _params
	low := object.union(_pay(600000), {"runtime": {"risk_level": "low"}})
	risk.level == "HIGH"
		with input.action as low
		with input.context.counters as _known
		with data.kcp_data.matrix.parameters as p
	critical := object.union(_pay(100), {"runtime": {"risk_level": "critical"}})
	risk.level == "CRITICAL"
		with input.action as critical
		with input.context.counters as _known
		with data.kcp_data.matrix.parameters as p
}

test_counts_for_another_beneficiary_are_not_history if {
	p := _params
	other := {"beneficiary": {"key": "t/other", "prior_payments": 0}}
	risk.level == "MEDIUM"
		with input.action as _pay(100)
		with input.context.counters as other
		with data.kcp_data.matrix.parameters as p
	{f[0] | some f in risk.factors} == {"beneficiary_history_unknown"}
		with input.action as _pay(100)
		with input.context.counters as other
		with data.kcp_data.matrix.parameters as p
}

test_a_beneficiary_flag_raises_it_attested_or_stated if {
	p := _params
	attested := {"new_beneficiary": {"value": true, "class": "attested", "source": "attestation:x/k"}}
	risk.level == "MEDIUM"
		with input.action as _pay(100)
		with input.context.counters as _known
		with input.context.facts as attested
		with data.kcp_data.matrix.parameters as p
	stated := object.union(_pay(100), {"attributes": {"modified_beneficiary": true}})
	risk.level == "MEDIUM"
		with input.action as stated
		with input.context.counters as _known
		with data.kcp_data.matrix.parameters as p
	lowered := {"new_beneficiary": {"value": false, "class": "attested", "source": "attestation:x/k"}}
	risk.level == "LOW"
		with input.action as _pay(100)
		with input.context.counters as _known
		with input.context.facts as lowered
		with data.kcp_data.matrix.parameters as p
}

test_only_a_value_transfer_has_payment_risk if {
	p := object.union(_params, {"money": {"high_value_minor": {"USD": 500000}, "confirmation_minor": {"USD": 0}}})
	read := {
		"tenant_id": "t", "action_type": "read",
		"amount": {"value_minor": 0, "currency": "USD"}, "target": {"reference": "b"},
	}
	first := {"beneficiary": {"key": "t/b", "prior_payments": 0}}
	risk.factors == set() with input.action as read with input.context.counters as first
		with data.kcp_data.matrix.parameters as p
}

test_the_confirmation_amount_itself_raises_it if {
	p := _params
	found := risk.factors with input.action as _pay(50000) with input.context.counters as _known
		with data.kcp_data.matrix.parameters as p
	found == {["confirmation_amount", "MEDIUM"]}
	below := risk.factors with input.action as _pay(49999) with input.context.counters as _known
		with data.kcp_data.matrix.parameters as p
	below == set()
}

test_only_a_beneficiary_flag_is_a_beneficiary_flag if {
	p := _params
	stated := object.union(_pay(100), {"attributes": {"screening_uncertain": true}})
	found := risk.factors with input.action as stated with input.context.counters as _known
		with data.kcp_data.matrix.parameters as p
	found == set()
}

test_a_unit_of_a_special_data_category_raises_it if {
	p := _params
	units := {"depth": 0, "count": 1, "slots": {"p": {"u": {"profile": 0}}}}
	profiles := [{"compliance": {"data_categories": ["contact", "health"]}}]
	read := {"tenant_id": "t", "action_type": "read", "knowledge": {"project": "p", "unit": "u"}}
	found := risk.factors with input.action as read with data.kcp_data.matrix.parameters as p
		with data.kcp_data.units as units with data.kcp_data.profiles as profiles
	found == {["special_data_category", "MEDIUM"]}
	risk.level == "MEDIUM" with input.action as read with data.kcp_data.matrix.parameters as p
		with data.kcp_data.units as units with data.kcp_data.profiles as profiles
}
