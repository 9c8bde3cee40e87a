package kcp.lib.metering_test

import rego.v1

import data.kcp.lib.metering

# Kept small and free of `with data...` over the evaluators, so regopy plans it (the budget
# evaluator's own tests are OPA-only: budget_test.rego says why).

_b := {"id": "agent_daily", "per": "agent", "currency": "USD", "window_seconds": 86400, "limit_minor": 5000}

_now := 1800000000

_spend(amount, extra) := object.union(
	{
		"budget": "agent_daily",
		"subject": "a1",
		"amount_minor": amount,
		"currency": "USD",
		"period_start_epoch_seconds": _now - 3600,
		"period_end_epoch_seconds": _now - 60,
		"issued_epoch_seconds": _now - 60,
		"expires_epoch_seconds": _now + 600,
		"class": "attested",
		"source": "attestation:metering-service/k1",
	},
	extra,
)

test_current_spend_in_the_window_is_summed if {
	spends := [_spend(1200, {}), _spend(300, {"period_start_epoch_seconds": _now - 7200})]
	c := {"metering": spends, "decision_epoch_seconds": _now}
	metering.spent(_b, "a1") == 1500 with input.context as c
	not metering.unusable(_b, "a1") with input.context as c
}

test_another_budget_key_or_an_old_period_is_not_counted_and_not_unusable if {
	old := _now - 90000
	spends := [
		_spend(1000, {"subject": "a2"}),
		_spend(1000, {"budget": "other"}),
		_spend(1000, {"period_start_epoch_seconds": old - 60, "period_end_epoch_seconds": old}),
	]
	c := {"metering": spends, "decision_epoch_seconds": _now}
	metering.spent(_b, "a1") == 0 with input.context as c
	not metering.unusable(_b, "a1") with input.context as c
}

test_a_stale_spend_is_not_counted_and_unusable if {
	spends := [_spend(1000, {"expires_epoch_seconds": _now})]
	c := {"metering": spends, "decision_epoch_seconds": _now}
	metering.spent(_b, "a1") == 0 with input.context as c
	metering.unusable(_b, "a1") with input.context as c
}

test_a_spend_in_another_currency_is_not_counted_and_unusable if {
	spends := [_spend(1000, {"currency": "EUR"})]
	c := {"metering": spends, "decision_epoch_seconds": _now}
	metering.spent(_b, "a1") == 0 with input.context as c
	metering.unusable(_b, "a1") with input.context as c
}

test_without_a_decision_time_a_spend_is_unusable if {
	spends := [_spend(1000, {})]
	c := {"metering": spends}
	metering.spent(_b, "a1") == 0 with input.context as c
	metering.unusable(_b, "a1") with input.context as c
}

test_a_refused_spend_makes_the_budget_it_names_unusable if {
	refused := [{"fact": "metered_spend", "reason": "bad_signature", "budget": "agent_daily"}]
	metering.unusable(_b, "a1") with input.context.attestations_refused as refused with input.context.metering as []
	other := [{"fact": "metered_spend", "reason": "issuer_not_allowed", "budget": "other"}]
	not metering.unusable(_b, "a1") with input.context.attestations_refused as other with input.context.metering as []
	unnamed := [{"fact": "metered_spend", "reason": "malformed"}]
	metering.unusable(_b, "a1") with input.context.attestations_refused as unnamed with input.context.metering as []
	fact := [{"fact": "evidence_status", "reason": "bad_signature"}]
	not metering.unusable(_b, "a1") with input.context.attestations_refused as fact with input.context.metering as []
}

test_a_metered_budget_needs_a_metering_source if {
	metered := object.union(_b, {"metered": true})
	metering.unusable(metered, "a1") with input.context as {"decision_epoch_seconds": _now}
	not metering.unusable(metered, "a1") with input.context as {"decision_epoch_seconds": _now, "metering": []}
	not metering.unusable(_b, "a1") with input.context as {"decision_epoch_seconds": _now}
	metering.spent(_b, "a1") == 0 with input.context as {"decision_epoch_seconds": _now}
}

# A stale spend, one in another currency, or one without a decision time holds only the budget
# and key it names, and only when its period reaches into the window.
test_an_unusable_spend_holds_only_its_own_budget_key_and_window if {
	old := _now - 90000
	every extra in [{"expires_epoch_seconds": _now}, {"currency": "EUR"}] {
		spends := [
			_spend(1000, object.union(extra, {"subject": "a2"})),
			_spend(1000, object.union(extra, {"budget": "other"})),
			_spend(1000, object.union(extra, {"period_start_epoch_seconds": old - 60, "period_end_epoch_seconds": old})),
		]
		c := {"metering": spends, "decision_epoch_seconds": _now}
		not metering.unusable(_b, "a1") with input.context as c
	}
	untimed := {"metering": [_spend(1000, {"subject": "a2"}), _spend(1000, {"budget": "other"})]}
	not metering.unusable(_b, "a1") with input.context as untimed
}

test_a_period_ending_at_the_windows_start_is_outside_it if {
	edge := _now - 86400
	c := {"metering": [_spend(1000, {"period_end_epoch_seconds": edge})], "decision_epoch_seconds": _now}
	metering.spent(_b, "a1") == 0 with input.context as c
	inside := {"metering": [_spend(1000, {"period_end_epoch_seconds": edge + 1})], "decision_epoch_seconds": _now}
	metering.spent(_b, "a1") == 1000 with input.context as inside
}

test_a_decision_time_that_is_not_a_number_is_no_time if {
	c := {"metering": [_spend(1000, {})], "decision_epoch_seconds": "1800000000"}
	metering.spent(_b, "a1") == 0 with input.context as c
	metering.unusable(_b, "a1") with input.context as c
}
