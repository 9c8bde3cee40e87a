package kcp.evaluators.lifecycle_test

import rego.v1

import data.kcp.evaluators.lifecycle

# 2026-11-01T00:00:00Z = 1793491200; 2026-11-30T23:59:59Z = 1796083199 (inclusive bounds).
_from := 1793491200

_until := 1796083199

_units := {"depth": 0, "count": 7, "slots": {"p": {
	"windowed": {"profile": 0},
	"open-start": {"profile": 1},
	"plain": {"profile": 2},
	"excluded": {"profile": 3},
	"old": {"profile": 4},
	"orphan": {"profile": 5},
	"odd-labels": {"profile": 6},
}}}

_profiles := [
	{
		"temporal": {
			"valid_from": "2026-11-01",
			"valid_until": "2026-11-30",
			"superseded_by": "plain",
			"from_epoch_seconds": _from,
			"until_epoch_seconds": _until,
		},
	},
	{"temporal": {"valid_until": "2026-11-30", "from_epoch_seconds": null, "until_epoch_seconds": _until}},
	{"temporal": null, "not_for": [], "deprecated": false, "superseded_by": []},
	{"not_for": ["initial kcp adoption (no prior version)", "migration from v2 to v3"], "not_for_strict": true},
	{"deprecated": true, "superseded_by": ["new-a", "new-b"]},
	{"deprecated": true, "superseded_by": []},
	{
		"temporal": {
			"valid_from": 5,
			"valid_until": 5,
			"superseded_by": 5,
			"from_epoch_seconds": _from,
			"until_epoch_seconds": _until,
		},
	},
]

_life_findings(unit, now) := fs if {
	units := _units
	profiles := _profiles
	fs := lifecycle.findings with input.action as {"knowledge": {"project": "p", "unit": unit}}
		with input.context as {"decision_epoch_seconds": now}
		with data.kcp_data.units as units with data.kcp_data.profiles as profiles
}

_life_codes(unit, now) := {f.code | some f in _life_findings(unit, now)}

test_before_window_not_yet_valid if {
	fs := _life_findings("windowed", _from - 1)
	{[f.code, f.state] | some f in fs} == {["unit_not_yet_valid", "DENY"]}
	{f.details.valid_from | some f in fs} == {"2026-11-01"}
}

test_first_second_is_inside if {
	count(_life_findings("windowed", _from)) == 0
}

test_inside_window_no_finding if {
	count(_life_findings("windowed", _from + 86400)) == 0
}

test_last_second_is_inside if {
	count(_life_findings("windowed", _until)) == 0
}

test_after_window_expired_names_successor if {
	fs := _life_findings("windowed", _until + 1)
	{[f.code, f.state] | some f in fs} == {["unit_expired", "DENY"]}
	{f.details.superseded_by | some f in fs} == {"plain"}
	{f.message | some f in fs} == {
		"the unit was valid until 2026-11-30 and is no longer served (KCP §4.22); its successor is plain",
	}
}

test_open_start_never_too_early if {
	count(_life_findings("open-start", 0)) == 0
	_life_codes("open-start", _until + 1) == {"unit_expired"}
}

test_expired_without_successor_says_so_totally if {
	fs := _life_findings("open-start", _until + 1)
	{f.details.superseded_by | some f in fs} == {null}
}

test_no_temporal_block_always_active if {
	count(_life_findings("plain", 0)) == 0
	count(_life_findings("plain", 99999999999)) == 0
}

test_clock_absent_no_window_finding if {
	# context_check answers context_missing for the absent decision time (never an allow).
	units := _units
	profiles := _profiles
	fs := lifecycle.findings with input.action as {"knowledge": {"project": "p", "unit": "windowed"}}
		with input.context as {}
		with data.kcp_data.units as units with data.kcp_data.profiles as profiles
	count(fs) == 0
}

_life_purpose(unit, purpose, folded) := fs if {
	units := _units
	profiles := _profiles
	fs := lifecycle.findings with input.action as {"knowledge": {"project": "p", "unit": unit, "purpose": purpose}}
		with input.context as {"decision_epoch_seconds": _from, "folded": {"purpose": folded}}
		with data.kcp_data.units as units with data.kcp_data.profiles as profiles
}

test_not_for_match_denies if {
	fs := _life_purpose("excluded", "Migration from v2 to v3", "migration from v2 to v3")
	{[f.code, f.state, f.rule] | some f in fs} == {["unit_not_for_purpose", "DENY", "kcp.lifecycle.not_for"]}
	{f.details.not_for_strict | some f in fs} == {true}
}

test_not_for_other_purpose_passes if {
	count(_life_purpose("excluded", "Upgrade v2 to v3", "upgrade v2 to v3")) == 0
}

test_not_for_compares_the_fold_not_the_raw_purpose if {
	# The raw purpose differs in case; only the fold the gate built is compared.
	_life_codes_of(_life_purpose("excluded", "MIGRATION FROM V2 TO V3", "migration from v2 to v3")) == {
		"unit_not_for_purpose",
	}
}

test_not_for_on_unit_without_entries_passes if {
	count(_life_purpose("plain", "Migration from v2 to v3", "migration from v2 to v3")) == 0
}

test_purpose_without_fold_denies if {
	units := _units
	profiles := _profiles
	fs := lifecycle.findings with input.action as {"knowledge": {"project": "p", "unit": "excluded", "purpose": "x"}}
		with input.context as {"decision_epoch_seconds": _from}
		with data.kcp_data.units as units with data.kcp_data.profiles as profiles
	{[f.code, f.state] | some f in fs} == {["purpose_not_folded", "DENY"]}
}

test_purpose_without_fold_on_a_unit_without_not_for_passes if {
	units := _units
	profiles := _profiles
	fs := lifecycle.findings with input.action as {"knowledge": {"project": "p", "unit": "plain", "purpose": "x"}}
		with input.context as {"decision_epoch_seconds": _from}
		with data.kcp_data.units as units with data.kcp_data.profiles as profiles
	count(fs) == 0
}

test_a_decision_time_that_is_not_a_number_decides_no_window if {
	# context_check refuses such an input; here the window rules must not compare it at all
	# (null sorts below every number and a string above, so either would fake a finding).
	count(_life_findings("windowed", null)) == 0
	count(_life_findings("windowed", "2026-12-01")) == 0
}

test_labels_that_are_not_strings_still_deny_totally if {
	# A malformed profile (never compiled so) must not drop the DENY through an undefined message.
	early := _life_findings("odd-labels", _from - 1)
	{[f.code, f.details.valid_from] | some f in early} == {["unit_not_yet_valid", "(unknown)"]}
	late := _life_findings("odd-labels", _until + 1)
	{[f.code, f.details.valid_until, f.details.superseded_by] | some f in late} == {["unit_expired", "(unknown)", null]}
}

test_no_purpose_no_not_for_finding if {
	count(_life_findings("excluded", _from)) == 0
}

_life_codes_of(fs) := {f.code | some f in fs}

test_deprecated_names_successors if {
	fs := _life_findings("old", _from)
	{[f.code, f.state] | some f in fs} == {["unit_deprecated", "ALLOW"]}
	{f.message | some f in fs} == {"the unit is deprecated (KCP §4.13); prefer new-a, new-b"}
	units := _units
	profiles := _profiles
	lifecycle.successors == ["new-a", "new-b"] with input.action as {"knowledge": {"project": "p", "unit": "old"}}
		with data.kcp_data.units as units with data.kcp_data.profiles as profiles
}

test_deprecated_without_successor_still_served if {
	fs := _life_findings("orphan", _from)
	{[f.code, f.state] | some f in fs} == {["unit_deprecated", "ALLOW"]}
	{f.message | some f in fs} == {"the unit is deprecated (KCP §4.13); no unit declares that it supersedes it"}
}

test_not_deprecated_no_finding if {
	count(_life_findings("plain", _from)) == 0
}

test_unknown_unit_no_finding if {
	count(_life_findings("nope", 0)) == 0
}
