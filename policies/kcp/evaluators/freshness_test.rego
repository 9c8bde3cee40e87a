package kcp.evaluators.freshness_test

import rego.v1

import data.kcp.evaluators.freshness

_units(validated_day) := {
	"depth": 0,
	"count": 1,
	"slots": {"p": {"u": {"profile": 0, "validated": "2026-01-01", "validated_epoch_day": validated_day}}},
}

_profiles(on_stale) := [{"freshness": {"max_age_days": 30, "on_stale": on_stale, "review_contact": null}}]

test_fresh_unit_has_no_finding if {
	units := _units(100)
	profiles := _profiles("block")
	count(freshness.findings) == 0 with input.action.knowledge as {"project": "p", "unit": "u"}
		with input.context.decision_epoch_day as 129
		with data.kcp_data.units as units with data.kcp_data.profiles as profiles
}

test_the_last_day_of_max_age_is_fresh_and_the_next_is_stale if {
	units := _units(100)
	profiles := _profiles("block")
	count(freshness.findings) == 0 with input.action.knowledge as {"project": "p", "unit": "u"}
		with input.context.decision_epoch_day as 130
		with data.kcp_data.units as units with data.kcp_data.profiles as profiles
	{f.code | some f in freshness.findings} == {"unit_stale"} with input.action.knowledge as {"project": "p", "unit": "u"}
		with input.context.decision_epoch_day as 131
		with data.kcp_data.units as units with data.kcp_data.profiles as profiles
}

test_block_denies_degrade_escalates_warn_allows if {
	units := _units(100)
	block := _profiles("block")
	degrade := _profiles("degrade")
	warn := _profiles("warn")
	{f.state | some f in freshness.findings} == {"DENY"} with input.action.knowledge as {"project": "p", "unit": "u"}
		with input.context.decision_epoch_day as 131
		with data.kcp_data.units as units with data.kcp_data.profiles as block
	{f.state | some f in freshness.findings} == {"ESCALATE"} with input.action.knowledge as {"project": "p", "unit": "u"}
		with input.context.decision_epoch_day as 131
		with data.kcp_data.units as units with data.kcp_data.profiles as degrade
	{f.state | some f in freshness.findings} == {"ALLOW"} with input.action.knowledge as {"project": "p", "unit": "u"}
		with input.context.decision_epoch_day as 131
		with data.kcp_data.units as units with data.kcp_data.profiles as warn
}

test_never_validated_is_stale if {
	units := _units(null)
	profiles := _profiles("block")
	{f.code | some f in freshness.findings} == {"unit_stale"} with input.action.knowledge as {"project": "p", "unit": "u"}
		with input.context.decision_epoch_day as 1
		with data.kcp_data.units as units with data.kcp_data.profiles as profiles
}

test_missing_clock_denies if {
	units := _units(100)
	profiles := _profiles("warn")
	{f.code | some f in freshness.findings} == {"decision_time_missing"}
		with input.action.knowledge as {"project": "p", "unit": "u"}
		with data.kcp_data.units as units with data.kcp_data.profiles as profiles
}
