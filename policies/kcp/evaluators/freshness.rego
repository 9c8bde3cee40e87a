# METADATA
# title: Freshness
# description: |
#   A unit whose validated date is older than freshness.max_age_days is stale; on_stale
#   decides: warn = an obligation to review, degrade = ESCALATE, block = DENY. A unit under
#   a freshness policy that was never validated is stale. Time comes from input (the
#   decision's epoch day), never from the clock, so a replay decides the same.
# custom:
#   evaluator_id: freshness_check
#   evaluator_version: "1.0.0"
package kcp.evaluators.freshness

import rego.v1

import data.kcp.lib.facts

_policy := facts.profile.freshness

_today := input.context.decision_epoch_day

# METADATA
# title: Stale
default stale := false

stale if {
	is_object(_policy)
	not is_number(facts.unit.validated_epoch_day)
}

stale if {
	is_object(_policy)
	# Guarded: `null + n` is an error under regopy's strict builtin errors (the gate's mode)
	# and would turn a never-validated unit into an engine_error instead of "stale".
	is_number(facts.unit.validated_epoch_day)
	# KCP §15.7: stale once (today - validated) > max_age_days; the last allowed day is fresh.
	_today > facts.unit.validated_epoch_day + _policy.max_age_days
}

# METADATA
# title: Obligations
# description: A stale unit is served (on_stale warn) or held; either way someone reviews it.
obligations contains "review_stale_unit" if stale

_state := {"warn": "ALLOW", "degrade": "ESCALATE", "block": "DENY"}

default _clock_given := false

_clock_given if is_number(input.context.decision_epoch_day)

# METADATA
# title: Findings
# custom:
#   requires: [input.action.knowledge.unit, input.context.decision_epoch_day]
#   waivable: [unit_stale]
findings contains finding if {
	_clock_given
	stale
	text1 := concat("", [
		"unit last validated ",
		_validated_label,
		" is older than ",
		format_int(_policy.max_age_days, 10),
		" days (on_stale: ",
		_policy.on_stale,
		")",
	])
	finding := {
		"code": "unit_stale",
		"rule": "kcp.freshness_policy",
		"state": _state[_policy.on_stale],
		"controls": [],
		"message": text1,
		"details": {"on_stale": _policy.on_stale, "review_contact": _policy.review_contact},
	}
}

# METADATA
# custom:
#   requires: [input.action.knowledge.unit]
#   absent: "clock absent: DENY (this rule)"
findings contains finding if {
	is_object(_policy)
	not _clock_given
	finding := {
		"code": "decision_time_missing",
		"rule": "kcp.freshness_policy",
		"state": "DENY",
		"controls": [],
		"message": "the unit has a freshness policy but input.context.decision_epoch_day is missing",
		"details": {},
	}
}

# Message parts are total (a default when the value is missing): a message built from an
# undefined value would make the whole finding undefined and drop a DENY (fail open). Messages
# use concat, never sprintf over strings (docs/engine-findings.md items 13 and 19).

_validated_label := facts.unit.validated if is_string(facts.unit.validated)

_validated_label := "never" if not _validated_label_given

_validated_label_given if is_string(facts.unit.validated)

# METADATA
# title: Applies (the decision plan, compile time)
# description: |
#   Whether this evaluator can find anything (or owe an obligation) for a unit of `profile` and an
#   action of type `task`, from declarations alone. `kcp-opa compile` evaluates it over every
#   profile and every action type the matrix names into the bundle's decision plan; a decision
#   reaches this evaluator only when its plan row names it (kcp.gate.planned). It may
#   over-approximate (a needless visit costs time) but never miss (a miss skips a finding). It
#   reads only its arguments and data.kcp_data, never input. docs/extending.md.
applies(profile, _) if is_object(profile.freshness)
