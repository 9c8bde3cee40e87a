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

import data.kcp.evaluators.finding
import data.kcp.lib.facts

evaluator := {"id": "freshness_check", "version": "1.0.0"}

_policy := facts.unit.freshness

_today := input.context.decision_epoch_day

# METADATA
# title: Stale
stale if {
	is_object(_policy)
	not is_number(facts.unit.validated_epoch_day)
}

stale if {
	is_object(_policy)
	_today >= facts.unit.validated_epoch_day + _policy.max_age_days
}

_state := {"warn": "ALLOW", "degrade": "ESCALATE", "block": "DENY"}

_clock_given if is_number(input.context.decision_epoch_day)

# METADATA
# title: Findings
findings contains finding.new(
	evaluator, "unit_stale", "kcp.freshness_policy", _state[_policy.on_stale], [],
	text1,
	{"on_stale": _policy.on_stale, "review_contact": _policy.review_contact},
) if {
	text1 := sprintf("unit last validated %v is older than %d days (on_stale: %v)", [facts.unit.validated, _policy.max_age_days, _policy.on_stale])
	_clock_given
	stale
}

findings contains finding.new(
	evaluator, "decision_time_missing", "kcp.freshness_policy", "DENY", [],
	"the unit has a freshness policy but input.context.decision_epoch_day is missing",
	{},
) if {
	is_object(_policy)
	not _clock_given
}
