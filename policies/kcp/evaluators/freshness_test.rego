package kcp.evaluators.freshness_test

import rego.v1

import data.kcp.evaluators.freshness

_unit(on_stale, validated_day) := {"id": "u", "validated": "2026-01-01", "validated_epoch_day": validated_day, "freshness": {"max_age_days": 30, "on_stale": on_stale, "review_contact": null}}

_units(on_stale, validated_day) := {"depth": 0, "count": 1, "slots": {"p": {"u": _unit(on_stale, validated_day)}}}

test_fresh_unit_has_no_finding if {
	units := _units("block", 100)
	count(freshness.findings) == 0 with input.action.knowledge as {"project": "p", "unit": "u"}
		with input.context.decision_epoch_day as 129
		with data.kcp_data.units as units
}

test_block_denies_degrade_escalates_warn_allows if {
	block := _units("block", 100)
	degrade := _units("degrade", 100)
	warn := _units("warn", 100)
	{f.state | some f in freshness.findings} == {"DENY"} with input.action.knowledge as {"project": "p", "unit": "u"}
		with input.context.decision_epoch_day as 130
		with data.kcp_data.units as block
	{f.state | some f in freshness.findings} == {"ESCALATE"} with input.action.knowledge as {"project": "p", "unit": "u"}
		with input.context.decision_epoch_day as 130
		with data.kcp_data.units as degrade
	{f.state | some f in freshness.findings} == {"ALLOW"} with input.action.knowledge as {"project": "p", "unit": "u"}
		with input.context.decision_epoch_day as 130
		with data.kcp_data.units as warn
}

test_never_validated_is_stale if {
	units := _units("block", null)
	{f.code | some f in freshness.findings} == {"unit_stale"} with input.action.knowledge as {"project": "p", "unit": "u"}
		with input.context.decision_epoch_day as 1
		with data.kcp_data.units as units
}

test_missing_clock_denies if {
	units := _units("warn", 100)
	{f.code | some f in freshness.findings} == {"decision_time_missing"} with input.action.knowledge as {"project": "p", "unit": "u"}
		with data.kcp_data.units as units
}
