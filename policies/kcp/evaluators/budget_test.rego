# kcp-opa: engines=opa
# regopy does not finish planning these tests under `with data.kcp_data.matrix.parameters as ...`
# over the budget evaluator and the facts it imports (no result after 200 s, measured 2026-12-01;
# docs/engine-findings.md item 12). The evaluator runs on both engines over compiled bundles in
# the budget decision cases (fixtures/cases/budget.yaml, tests/decide/test_gate_cases.py).
package kcp.evaluators.budget_test

import rego.v1

import data.kcp.evaluators.budget

_params := {
	"approver_roles": {"default": "lead", "by_task_type": {"payment": "treasurer"}},
	"money": {"high_value_minor": {"EUR": 100000}, "confirmation_minor": {}},
	"budgets": [
		{
			"id": "daily",
			"per": "tenant",
			"task_types": ["payment", "read"],
			"currency": "EUR",
			"window_seconds": 86400,
			"approval_threshold_minor": 3000,
			"limit_minor": 5000,
		},
	],
	"velocity": [
		{
			"id": "per_beneficiary",
			"per": "beneficiary",
			"currency": "EUR",
			"window_seconds": 3600,
			"max_count": 3,
			"max_sum_minor": 4000,
			"outcome": "ESCALATE",
		},
	],
	"rate_limits": {"outcome": "DENY"},
}

_payment(value) := {
	"tenant_id": "t1", "agent_id": "a1", "action_type": "payment",
	"amount": {"value_minor": value, "currency": "EUR"},
	"target": {"type": "beneficiary", "reference": "sup_1"},
}

_counts(spent, reserved, vcount, vsum) := {
	"budgets": {"daily": {"key": "t1", "spent_minor": spent, "reserved_minor": reserved}},
	"velocity": {"per_beneficiary": {"key": "t1/sup_1", "count": vcount, "sum_minor": vsum}},
}

test_within_budget_no_finding if {
	p := _params
	found := budget.findings with input.action as _payment(1000) with input.context.counters as _counts(1000, 0, 0, 0)
		with data.kcp_data.matrix.parameters as p
	found == set()
}

test_limit_counts_spent_reserved_and_this_amount if {
	p := _params
	found := budget.findings with input.action as _payment(1000) with input.context.counters as _counts(3000, 1500, 0, 0)
		with data.kcp_data.matrix.parameters as p
	found == {{
		"code": "budget_exhausted", "rule": "budget.limit",
		"state": "ESCALATE", "controls": [],
		"message": "budget daily of t1 would reach 5500 EUR minor units; its limit is 5000",
		"details": {"budget": "daily", "key": "t1", "total_minor": 5500, "limit_minor": 5000},
	}}
}

test_exactly_at_limit_is_not_exhausted if {
	p := _params
	states := {f.code: f.state | some f in budget.findings} with input.action as _payment(1000)
		with input.context.counters as _counts(3000, 1000, 0, 0) with data.kcp_data.matrix.parameters as p
	states == {"budget_approval_required": "HUMAN_APPROVAL"}
}

test_approval_threshold_names_the_approver if {
	p := _params
	some f in budget.findings with input.action as _payment(2500) with input.context.counters as _counts(1000, 0, 0, 0)
		with data.kcp_data.matrix.parameters as p
	f.code == "budget_approval_required"
	f.details.approver_role == "treasurer"
	f.controls == ["independent_human_approval"]
}

test_a_read_against_a_spent_budget_is_exhausted if {
	p := _params
	read := {"tenant_id": "t1", "action_type": "read"}
	states := {f.code: f.state | some f in budget.findings} with input.action as read
		with input.context.counters as {"budgets": {"daily": {"key": "t1", "spent_minor": 5000, "reserved_minor": 0}}}
		with data.kcp_data.matrix.parameters as p
	states == {"budget_exhausted": "ESCALATE"}
}

test_no_counts_is_context_missing_whatever_is_stated if {
	p := _params
	action := object.union(_payment(100), {"runtime": {"budget_state": "within_budget"}})
	found := {[f.code, f.state, f.details.fields[0]] | some f in budget.findings} with input.action as action
		with data.kcp_data.matrix.parameters as p
	found == {
		["context_missing", "ESCALATE", "input.context.counters.budgets.daily"],
		["context_missing", "ESCALATE", "input.context.counters.velocity.per_beneficiary"],
	}
}

test_counts_for_another_key_are_missing if {
	p := _params
	counters := {
		"budgets": {"daily": {"key": "t2", "spent_minor": 0, "reserved_minor": 0}},
		"velocity": _counts(0, 0, 0, 0).velocity,
	}
	found := {f.details.fields[0] | some f in budget.findings; f.code == "context_missing"}
		with input.action as _payment(100)
		with input.context.counters as counters with data.kcp_data.matrix.parameters as p
	found == {"input.context.counters.budgets.daily"}
}

test_other_currency_and_task_type_do_not_spend if {
	p := _params
	usd := object.union(_payment(100), {"amount": {"value_minor": 100, "currency": "USD"}})
	count(budget.applicable) == 0 with input.action as usd with data.kcp_data.matrix.parameters as p
	count(budget.applicable) == 0
		with input.action as {"tenant_id": "t1", "action_type": "refund"}
		with data.kcp_data.matrix.parameters as p
}

test_velocity_count_and_sum if {
	p := _params
	by_count := {f.code: f.state | some f in budget.findings} with input.action as _payment(10)
		with input.context.counters as _counts(0, 0, 3, 30) with data.kcp_data.matrix.parameters as p
	by_count == {"velocity_exceeded": "ESCALATE"}
	by_sum := {f.code: f.state | some f in budget.findings} with input.action as _payment(1001)
		with input.context.counters as _counts(0, 0, 1, 3000) with data.kcp_data.matrix.parameters as p
	by_sum == {"velocity_exceeded": "ESCALATE"}
	under := budget.velocity_exceeded with input.action as _payment(1000)
		with input.context.counters as _counts(0, 0, 2, 3000) with data.kcp_data.matrix.parameters as p
	under == set()
}

test_beneficiary_key_prefers_the_account_fingerprint if {
	action := object.union(_payment(1), {"target": {"account_fingerprint": "sha256:abc"}})
	budget.key("beneficiary") == "t1/sha256:abc" with input.action as action
}

_rate_params := object.union(object.remove(_params, ["budgets", "velocity"]), {"budgets": [], "velocity": []})

_limited := {"depth": 0, "count": 1, "slots": {"p": {"u": {"profile": 0}}}}

_profiles := [
	{
		"rate_limits": {
			"default": {"requests_per_minute": 2, "requests_per_day": "unlimited"},
			"authenticated": {"requests_per_minute": 5},
		},
	},
]

_read_u := {"agent_id": "a1", "action_type": "read", "knowledge": {"project": "p", "unit": "u"}}

test_rate_limit_past_the_window_gets_the_matrix_outcome if {
	p := object.union(_rate_params, {"rate_limits": {"outcome": "ESCALATE"}})
	u := _limited
	profiles := _profiles
	found := {[f.code, f.state, f.details.window] | some f in budget.findings} with input.action as _read_u
		with input.context.counters as {
			"rate": {"unit": "p/u", "principal": "a1", "requests_per_minute": 3, "requests_per_hour": 3, "requests_per_day": 3},
		}
		with data.kcp_data.matrix.parameters as p with data.kcp_data.units as u with data.kcp_data.profiles as profiles
	found == {["rate_limited", "ESCALATE", "requests_per_minute"]}
	at_limit := budget.findings with input.action as _read_u
		with input.context.counters as {
			"rate": {
				"unit": "p/u",
				"principal": "a1",
				"requests_per_minute": 2,
				"requests_per_hour": 9,
				"requests_per_day": 900,
			},
		}
		with data.kcp_data.matrix.parameters as p with data.kcp_data.units as u with data.kcp_data.profiles as profiles
	at_limit == set()
}

test_authenticated_tier_and_missing_rate_counts if {
	p := _rate_params
	u := _limited
	profiles := _profiles
	action := object.union(_read_u, {"authorization_context": {"authenticated_principal": "user:1"}})
	budget.limits == {"requests_per_minute": 5} with input.action as action
		with data.kcp_data.units as u with data.kcp_data.profiles as profiles
	found := {[f.code, f.details.fields[0]] | some f in budget.findings} with input.action as action
		with input.context.counters as {"rate": {"unit": "p/u", "principal": "a1", "requests_per_minute": 1}}
		with data.kcp_data.matrix.parameters as p with data.kcp_data.units as u with data.kcp_data.profiles as profiles
	found == {["context_missing", "input.context.counters.rate"]}
}

_metered(amount, expires) := [{
	"budget": "daily", "subject": "t1", "amount_minor": amount, "currency": "EUR",
	"period_start_epoch_seconds": 1799990000, "period_end_epoch_seconds": 1799999000,
	"issued_epoch_seconds": 1799999000, "expires_epoch_seconds": expires,
	"class": "attested", "source": "attestation:metering-service/k1",
}]

test_attested_spend_is_added_to_the_total if {
	p := _params
	codes := {f.code: f.details.total_minor | some f in budget.findings} with input.action as _payment(1000)
		with input.context.counters as _counts(1000, 0, 0, 0)
		with input.context.metering as _metered(3500, 1800000600)
		with input.context.decision_epoch_seconds as 1800000000
		with data.kcp_data.matrix.parameters as p
	codes == {"budget_exhausted": 5500}
}

test_stale_attested_spend_is_not_counted_and_holds_the_budget if {
	p := _params
	found := {[f.code, f.rule, f.state] | some f in budget.findings} with input.action as _payment(1000)
		with input.context.counters as _counts(1000, 0, 0, 0)
		with input.context.metering as _metered(2500, 1800000000)
		with input.context.decision_epoch_seconds as 1800000000
		with data.kcp_data.matrix.parameters as p
	found == {["context_missing", "budget.metering", "ESCALATE"]}
}

test_a_velocity_rule_or_rate_limit_outcome_sets_state_and_controls if {
	deny := object.union(_params, {"velocity": [object.union(_params.velocity[0], {"outcome": "DENY"})]})
	denied := {[f.code, f.state, f.controls] | some f in budget.findings} with input.action as _payment(10)
		with input.context.counters as _counts(0, 0, 3, 30) with data.kcp_data.matrix.parameters as deny
	denied == {["velocity_exceeded", "DENY", []]}
	approve := object.union(_params, {"velocity": [object.union(_params.velocity[0], {"outcome": "HUMAN_APPROVAL"})]})
	approval := {[f.code, f.state, f.controls, f.details.approver_role] | some f in budget.findings}
		with input.action as _payment(10)
		with input.context.counters as _counts(0, 0, 3, 30) with data.kcp_data.matrix.parameters as approve
	approval == {["velocity_exceeded", "HUMAN_APPROVAL", ["independent_human_approval"], "treasurer"]}
	p := object.union(_rate_params, {"rate_limits": {"outcome": "HUMAN_APPROVAL"}})
	u := _limited
	profiles := _profiles
	limited := {[f.code, f.state, f.controls] | some f in budget.findings} with input.action as _read_u
		with input.context.counters as {
			"rate": {"unit": "p/u", "principal": "a1", "requests_per_minute": 3, "requests_per_hour": 3, "requests_per_day": 3},
		}
		with data.kcp_data.matrix.parameters as p with data.kcp_data.units as u with data.kcp_data.profiles as profiles
	limited == {["rate_limited", "HUMAN_APPROVAL", ["independent_human_approval"]]}
}

test_a_budget_over_all_task_types_spends_any_action if {
	p := object.union(_params, {"budgets": [object.union(_params.budgets[0], {"task_types": "all"})]})
	refund := object.union(_payment(2000), {"action_type": "refund"})
	found := {[f.code, f.details.total_minor] | some f in budget.findings} with input.action as refund
		with input.context.counters as _counts(4000, 0, 0, 0) with data.kcp_data.matrix.parameters as p
	found == {["budget_exhausted", 6000]}
}

test_a_non_string_account_fingerprint_falls_back_to_the_reference if {
	action := object.union(_payment(1), {"target": {"account_fingerprint": 42}})
	budget.beneficiary == "sup_1" with input.action as action
	budget.key("beneficiary") == "t1/sup_1" with input.action as action
}

test_counts_keyed_by_a_non_string_are_never_used if {
	p := object.union(_params, {"velocity": []})
	action := object.union(_payment(100), {"tenant_id": 7})
	counters := {"budgets": {"daily": {"key": 7, "spent_minor": 0, "reserved_minor": 0}}}
	found := {f.details.fields[0] | some f in budget.findings; f.code == "context_missing"} with input.action as action
		with input.context.counters as counters with data.kcp_data.matrix.parameters as p
	found == {"input.context.counters.budgets.daily"}
}

test_exactly_at_the_approval_threshold_needs_no_approval if {
	p := _params
	found := budget.findings with input.action as _payment(1000) with input.context.counters as _counts(2000, 0, 0, 0)
		with data.kcp_data.matrix.parameters as p
	found == set()
}

test_an_approval_threshold_that_is_not_a_number_asks_for_nothing if {
	p := object.union(_params, {"budgets": [object.union(_params.budgets[0], {"approval_threshold_minor": null})]})
	found := budget.findings with input.action as _payment(1000) with input.context.counters as _counts(3000, 0, 0, 0)
		with data.kcp_data.matrix.parameters as p
	found == set()
}

test_velocity_rules_only_for_a_value_transfer_in_their_currency if {
	p := _params
	read := {"tenant_id": "t1", "action_type": "read", "amount": {"value_minor": 0, "currency": "EUR"}}
	budget.velocity_rules == set() with input.action as read with data.kcp_data.matrix.parameters as p
	usd := object.union(_payment(100), {"amount": {"value_minor": 100, "currency": "USD"}})
	budget.velocity_rules == set() with input.action as usd with data.kcp_data.matrix.parameters as p
	ids := {v.id | some v in budget.velocity_rules} with input.action as _payment(100)
		with data.kcp_data.matrix.parameters as p
	ids == {"per_beneficiary"}
}

test_counts_that_are_not_numbers_or_absent_are_missing if {
	p := _params
	counters := {
		"budgets": {"daily": {"key": "t1", "spent_minor": "3000", "reserved_minor": 0}},
		"velocity": {"per_beneficiary": {"key": "t1/sup_1", "sum_minor": 0}},
	}
	found := {[f.code, f.details.fields[0]] | some f in budget.findings} with input.action as _payment(100)
		with input.context.counters as counters with data.kcp_data.matrix.parameters as p
	found == {
		["context_missing", "input.context.counters.budgets.daily"],
		["context_missing", "input.context.counters.velocity.per_beneficiary"],
	}
	reserved := {"budgets": {"daily": {"key": "t1", "spent_minor": 0, "reserved_minor": null}}, "velocity": {
		"per_beneficiary": {"key": "t1/sup_1", "count": 0},
	}}
	also := {f.details.fields[0] | some f in budget.findings} with input.action as _payment(100)
		with input.context.counters as reserved with data.kcp_data.matrix.parameters as p
	also == {"input.context.counters.budgets.daily", "input.context.counters.velocity.per_beneficiary"}
}

test_an_unusable_authenticated_principal_is_the_agent_on_the_default_tier if {
	u := _limited
	profiles := _profiles
	every principal in [7, ""] {
		action := object.union(_read_u, {"authorization_context": {"authenticated_principal": principal}})
		budget.principal == "a1" with input.action as action
		budget.limits == {"requests_per_minute": 2} with input.action as action
			with data.kcp_data.units as u with data.kcp_data.profiles as profiles
	}
	not budget.principal with input.action as object.union(_read_u, {"agent_id": 7})
}

test_an_authenticated_tier_that_is_not_an_object_falls_back_to_the_default if {
	u := _limited
	profiles := [{"rate_limits": {
		"default": {"requests_per_minute": 2, "requests_per_hour": "unlimited", "concurrent_sessions": 1},
		"authenticated": "unlimited",
	}}]
	action := object.union(_read_u, {"authorization_context": {"authenticated_principal": "user:1"}})
	budget.limits == {"requests_per_minute": 2} with input.action as action
		with data.kcp_data.units as u with data.kcp_data.profiles as profiles
}

test_rate_counts_for_another_unit_or_window_are_missing if {
	p := _rate_params
	u := _limited
	profiles := _profiles
	other_unit := {"rate": {"unit": "p/other", "principal": "a1", "requests_per_minute": 9}}
	found := {[f.code, f.details.fields[0]] | some f in budget.findings} with input.action as _read_u
		with input.context.counters as other_unit
		with data.kcp_data.matrix.parameters as p with data.kcp_data.units as u with data.kcp_data.profiles as profiles
	found == {["context_missing", "input.context.counters.rate"]}
	other_windows := {"rate": {"unit": "p/u", "principal": "a1", "requests_per_hour": 1, "requests_per_day": 1}}
	also := {[f.code, f.details.fields[0]] | some f in budget.findings} with input.action as _read_u
		with input.context.counters as other_windows
		with data.kcp_data.matrix.parameters as p with data.kcp_data.units as u with data.kcp_data.profiles as profiles
	also == {["context_missing", "input.context.counters.rate"]}
}

test_a_rate_limit_without_a_matrix_outcome_denies if {
	p := object.remove(_rate_params, ["rate_limits"])
	u := _limited
	profiles := _profiles
	found := {[f.code, f.state] | some f in budget.findings} with input.action as _read_u
		with input.context.counters as {"rate": {"unit": "p/u", "principal": "a1", "requests_per_minute": 3}}
		with data.kcp_data.matrix.parameters as p with data.kcp_data.units as u with data.kcp_data.profiles as profiles
	found == {["rate_limited", "DENY"]}
}
