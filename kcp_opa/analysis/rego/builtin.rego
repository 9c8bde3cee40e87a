# METADATA
# title: The gate contract's invariants, over one decision and the facts about its action
# description: |
#   Evaluated by `kcp-opa prove` on every generated action, with input
#   {input: the decision input, decision: the policy's answer (or {engine_error}), facts:
#   {unit_known, task_known, knowledge_bound, absent_needed, supplied: {path: [the decisions
#   with each value of that absent fact supplied]}}, and for a neighbour (the same
#   action made stronger) before: {decision} and change}. Each violation is the invariant's name.
#   premises names each invariant whose premise the action meets (what it is about: an unknown
#   unit, an absent needed fact, a stronger neighbour of a non-DENY): an invariant no action met
#   the premise of was never tested, and `kcp-opa prove` says VACUOUS instead of PROVED.
#   inapplicable names each invariant the bundle gives nothing to test (no unit declares a
#   temporal window), with why; it depends on the bundle only.
package kcp.analysis.builtin

import rego.v1

# The contract's routing order, weakest first (gate contract section 2).
rank := {
	"ALLOW": 0, "USER_CONFIRMATION": 1, "STEP_UP_AUTHENTICATION": 2, "IDENTITY_VERIFICATION": 3,
	"HUMAN_APPROVAL": 4, "ESCALATE": 5, "COMPLIANCE_REVIEW": 6, "DENY": 7,
}

_decision := input.decision

_allows if _decision.decision == "ALLOW"

_allows if _decision.execution_allowed == true

# -- Premises: what each invariant is about. A violation is its premise met and its claim broken.

premises contains "no_engine_error"

premises contains "executable_only_with_every_control" if _decision.execution_allowed == true

premises contains "unknown_unit_never_allows" if input.facts.unit_known == false

premises contains "unknown_task_type_never_allows" if input.facts.task_known == false

premises contains "absent_needed_fact_never_allows" if {
	input.facts.knowledge_bound == true
	count(input.facts.absent_needed) > 0
}

premises contains "absent_needed_fact_never_allows" if {
	input.facts.knowledge_bound == true
	count(object.get(input.facts, "supplied", {})) > 0
}

premises contains "unit_outside_its_window_never_allows" if _before_window

premises contains "unit_outside_its_window_never_allows" if _after_window

premises contains "action_outside_its_age_window_never_allows" if _too_old

premises contains "action_outside_its_age_window_never_allows" if _too_far_ahead

premises contains "monotone_stronger_restriction" if startswith(input.change, "stronger_restriction:")

premises contains concat("", ["monotone_", input.change]) if input.change in _monotone

premises contains "deny_is_terminal" if {
	input.change == "evidence_added"
	input.before.decision == "DENY"
}

_monotone := {"undeclared_field", "larger_amount", "one_more_hop"}

# Invariants the bundle gives nothing to test, with why (the same for every action).
inapplicable["unit_outside_its_window_never_allows"] := "no unit declares a temporal window" if {
	not _some_window
}

_some_window if {
	some profile in data.kcp_data.profiles
	some bound in ["from_epoch_seconds", "until_epoch_seconds"]
	is_number(profile.temporal[bound])
}

# -- Violations

violations contains "no_engine_error" if _decision.engine_error

violations contains "no_engine_error" if {
	not _decision.engine_error
	not rank[_decision.decision]
}

violations contains "executable_only_with_every_control" if {
	_decision.execution_allowed == true
	count(object.get(_decision, "missing_controls", [])) > 0
}

# Execution follows ALLOW, or an approval state (USER_CONFIRMATION .. HUMAN_APPROVAL) once every
# control it requires is recorded (gate contract: execution_allowed when APPROVED); a hold
# (ESCALATE, COMPLIANCE_REVIEW) or a DENY never executes.
violations contains "executable_only_with_every_control" if {
	_decision.execution_allowed == true
	not _passable(_decision.decision)
}

_passable(state) if rank[state] <= rank.HUMAN_APPROVAL

violations contains "unknown_unit_never_allows" if {
	"unknown_unit_never_allows" in premises
	_allows
}

violations contains "unknown_task_type_never_allows" if {
	"unknown_task_type_never_allows" in premises
	_allows
}

# One violation per absent fact, named after it: each hole gets its own counterexample.
violations contains concat("", ["absent_needed_fact_never_allows[", path, "]"]) if {
	input.facts.knowledge_bound == true
	some path in input.facts.absent_needed
	_allows
}

# The same, where the policies' METADATA does not list the fact: supplying a value of the absent
# fact holds or denies the action, so a rule reads it, and its absence allowed (fail open).
violations contains concat("", ["absent_needed_fact_never_allows[", path, "]"]) if {
	input.facts.knowledge_bound == true
	_allows
	some path, decided in object.get(input.facts, "supplied", {})
	some other in decided
	not _allowing(other)
}

_allowing(d) if d.decision == "ALLOW"

_allowing(d) if d.execution_allowed == true

# Temporal windows (KCP temporal, both ends inclusive): a unit is never served outside its window.
_before_window if {
	is_number(input.facts.window.from)
	input.input.context.decision_epoch_seconds < input.facts.window.from
}

_after_window if {
	is_number(input.facts.window.until)
	input.input.context.decision_epoch_seconds > input.facts.window.until
}

violations contains "unit_outside_its_window_never_allows" if {
	"unit_outside_its_window_never_allows" in premises
	_allows
}

# The action's own window (gate contract: action_stale and clock_skew): created_at more than the
# deployment's max age before the decision, or more than the allowed skew after it.
_age_limits := object.get(data.kcp_data.matrix, ["parameters", "context"], {})

_too_old if {
	ctx := input.input.context
	ctx.decision_epoch_seconds - ctx.action_created_epoch_seconds > object.get(_age_limits, "max_action_age_seconds", 86400)
}

_too_far_ahead if {
	ctx := input.input.context
	ctx.action_created_epoch_seconds - ctx.decision_epoch_seconds > object.get(_age_limits, "max_future_skew_seconds", 900)
}

violations contains "action_outside_its_age_window_never_allows" if {
	"action_outside_its_age_window_never_allows" in premises
	_allows
}

# A stronger declaration (one more restriction on the unit) never weakens the same action.
violations contains "monotone_stronger_restriction" if {
	"monotone_stronger_restriction" in premises
	_weakened
}

# A stronger action (one more undeclared field, a larger amount, one more hop) never weakens.
violations contains concat("", ["monotone_", input.change]) if {
	input.change in _monotone
	_weakened
}

_weakened if rank[_decision.decision] < rank[input.before.decision]

_weakened if {
	input.before.execution_allowed == false
	_decision.execution_allowed == true
}

# DENY is terminal: recording every required control changes nothing.
violations contains "deny_is_terminal" if {
	"deny_is_terminal" in premises
	_decision.decision != "DENY"
}
