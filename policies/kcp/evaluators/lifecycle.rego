# METADATA
# title: KCP unit lifecycle
# description: |
#   Whether the unit may be served at the decision time and for the stated purpose, and what the
#   caller must know when it is served. temporal (KCP §4.22): a unit is active when
#   valid_from <= decision time <= valid_until (both inclusive; a bare date's valid_until is its
#   last second); before = DENY unit_not_yet_valid, after = DENY unit_expired (naming the
#   temporal successor). The decision time is input.context.decision_epoch_seconds, never the
#   clock. not_for (§4.20): the action's folded purpose (input.context.folded.purpose, built by
#   the gate) equal to a folded not_for entry = DENY unit_not_for_purpose (kcp-opa enforces it as
#   a refusal; the spec leaves enforcement to the gate, §14.1); a purpose without its fold on such
#   a unit = DENY purpose_not_folded. deprecated (§4.13): served, with an ALLOW-state
#   unit_deprecated reason naming the units that supersede it and the obligation
#   prefer_superseding_unit.
# custom:
#   evaluator_id: lifecycle_check
#   evaluator_version: "1.0.0"
package kcp.evaluators.lifecycle

import rego.v1

import data.kcp.lib.facts

_now := input.context.decision_epoch_seconds

_temporal := facts.profile.temporal

# Bounds are numbers or absent/null (an open end); every comparison is guarded by is_number:
# `null < n` is an error under regopy's strict builtin errors and would drop a DENY.
_from := _temporal.from_epoch_seconds if is_number(_temporal.from_epoch_seconds)

_until := _temporal.until_epoch_seconds if is_number(_temporal.until_epoch_seconds)

# METADATA
# title: Not yet valid
# description: The decision time is before the unit's valid_from.
default not_yet_valid := false

not_yet_valid if {
	is_number(_now)
	# mutate: equivalent _from is only ever a number (its rule checks is_number): the guard never fails where _from exists
	is_number(_from)
	_now < _from
}

# METADATA
# title: Expired
# description: The decision time is after the unit's valid_until.
default expired := false

expired if {
	is_number(_now)
	# mutate: equivalent _until is only ever a number (its rule checks is_number): the guard never fails where _until is
	is_number(_until)
	_now > _until
}

# Message parts are total (docs/engine-findings.md items 13 and 19): an undefined part would
# make the finding undefined and drop the DENY.
_from_label := _temporal.valid_from if {
	is_string(_temporal.valid_from)
} else := "(unknown)"

_until_label := _temporal.valid_until if {
	is_string(_temporal.valid_until)
} else := "(unknown)"

_successor_note := concat("", ["; its successor is ", _temporal.superseded_by]) if {
	# mutate: equivalent without it a non-string successor makes concat fail: the body is undefined, the else gives ""
	is_string(_temporal.superseded_by)
} else := ""

_successor_detail := _temporal.superseded_by if {
	is_string(_temporal.superseded_by)
} else := null

# METADATA
# title: Findings
# custom:
#   requires: [input.action.knowledge.unit, input.context.decision_epoch_seconds]
findings contains finding if {
	# on OPA (the engine mutate runs) an unknown unit's profile is null, so every profile fact below is undefined without
	# this line too; kept for regopy, where not f(undefined) differs (docs/engine-findings.md item 29)
	# mutate: equivalent on OPA, as said above; kept for regopy (docs/engine-findings.md item 29)
	facts.unit_known
	not_yet_valid
	finding := {
		"code": "unit_not_yet_valid",
		"rule": "kcp.lifecycle.temporal",
		"state": "DENY",
		"controls": [],
		"message": concat("", ["the unit is valid from ", _from_label, " and is not served before (KCP §4.22)"]),
		"details": {"valid_from": _from_label},
	}
}

# METADATA
# custom:
#   requires: [input.action.knowledge.unit, input.context.decision_epoch_seconds]
findings contains finding if {
	# on OPA (the engine mutate runs) an unknown unit's profile is null, so every profile fact below is undefined without
	# this line too; kept for regopy, where not f(undefined) differs (docs/engine-findings.md item 29)
	# mutate: equivalent on OPA, as said above; kept for regopy (docs/engine-findings.md item 29)
	facts.unit_known
	expired
	finding := {
		"code": "unit_expired",
		"rule": "kcp.lifecycle.temporal",
		"state": "DENY",
		"controls": [],
		"message": concat("", [
			"the unit was valid until ",
			_until_label,
			" and is no longer served (KCP §4.22)",
			_successor_note,
		]),
		"details": {"valid_until": _until_label, "superseded_by": _successor_detail},
	}
}

# -- not_for (KCP §4.20) ------------------------------------------------------------------------
# Both sides are folded in Python (kcp_opa.core.textfold: NFKD, casefold, marks and format
# characters dropped, NFC): the manifest's entries at compile time, the purpose by the gate into
# input.context.folded. Never lower() here: regopy's is ASCII-only (docs/engine-findings.md).

_not_for := {entry | some entry in facts.profile.not_for; is_string(entry)} if {
	# mutate: equivalent iterating a non-array is undefined, so the else gives the empty set as before
	is_array(facts.profile.not_for)
} else := set()

_purpose_given if is_string(input.action.knowledge.purpose)

_fold_given if is_string(input.context.folded.purpose)

# METADATA
# title: Purpose excluded by not_for
# description: The action's folded purpose equals one of the unit's folded not_for entries.
default not_for_match := false

not_for_match if input.context.folded.purpose in _not_for

_strict := facts.profile.not_for_strict == true

# METADATA
# custom:
#   requires: [input.action.knowledge.unit]
#   absent: "purpose absent: no stated purpose to exclude"
findings contains finding if {
	# on OPA (the engine mutate runs) an unknown unit's profile is null, so every profile fact below is undefined without
	# this line too; kept for regopy, where not f(undefined) differs (docs/engine-findings.md item 29)
	# mutate: equivalent on OPA, as said above; kept for regopy (docs/engine-findings.md item 29)
	facts.unit_known
	not_for_match
	finding := {
		"code": "unit_not_for_purpose",
		"rule": "kcp.lifecycle.not_for",
		"state": "DENY",
		"controls": [],
		"message": "the unit declares itself not for the action's stated purpose (KCP §4.20 not_for)",
		"details": {"purpose": input.context.folded.purpose, "not_for_strict": _strict},
	}
}

# METADATA
# custom:
#   requires: [input.action.knowledge.unit]
#   absent: "purpose absent: nothing to fold"
findings contains finding if {
	# on OPA (the engine mutate runs) an unknown unit's profile is null, so every profile fact below is undefined without
	# this line too; kept for regopy, where not f(undefined) differs (docs/engine-findings.md item 29)
	# mutate: equivalent on OPA, as said above; kept for regopy (docs/engine-findings.md item 29)
	facts.unit_known
	count(_not_for) > 0
	_purpose_given
	not _fold_given
	finding := {
		"code": "purpose_not_folded",
		"rule": "kcp.lifecycle.not_for",
		"state": "DENY",
		"controls": [],
		"message": concat("", [
			"not_for: the purpose cannot be checked without its folded form in input.context.folded, which the gate ",
			"builds",
		]),
		"details": {},
	}
}

# -- deprecated (KCP §4.13, §4.8) -----------------------------------------------------------------

# METADATA
# title: Superseding units
# description: The units that declare supersedes for the unit under decision (sorted at compile time).
successors := [s | some s in facts.profile.superseded_by; is_string(s)] if {
	# mutate: equivalent iterating a non-array is undefined, so the else gives [] as before
	is_array(facts.profile.superseded_by)
} else := []

# METADATA
# title: Deprecated
default deprecated := false

deprecated if {
	# on OPA (the engine mutate runs) an unknown unit's profile is null, so every profile fact below is undefined without
	# this line too; kept for regopy, where not f(undefined) differs (docs/engine-findings.md item 29)
	# mutate: equivalent on OPA, as said above; kept for regopy (docs/engine-findings.md item 29)
	facts.unit_known
	facts.profile.deprecated == true
}

# METADATA
# title: Obligations
# description: |
#   A deprecated unit is served; the caller should move to its successor, which the
#   unit_deprecated reason names (KCP §4.13, §4.8).
obligations contains "prefer_superseding_unit" if {
	deprecated
	count(successors) > 0
}

_prefer := concat("", ["; prefer ", concat(", ", successors)]) if {
	count(successors) > 0
} else := "; no unit declares that it supersedes it"

# METADATA
# custom:
#   requires: [input.action.knowledge.unit]
findings contains finding if {
	deprecated
	finding := {
		"code": "unit_deprecated",
		"rule": "kcp.lifecycle.deprecated",
		"state": "ALLOW",
		"controls": [],
		"message": concat("", ["the unit is deprecated (KCP §4.13)", _prefer]),
		"details": {"superseded_by": successors},
	}
}

# METADATA
# title: Applies (the decision plan, compile time)
# description: |
#   Whether this evaluator can find anything (or owe an obligation) for a unit of `profile` and an
#   action of type `task`, from declarations alone. `kcp-opa compile` evaluates it over every
#   profile and every action type the matrix names into the bundle's decision plan; a decision
#   reaches this evaluator only when its plan row names it (kcp.gate.planned). It may
#   over-approximate (a needless visit costs time) but never miss (a miss skips a finding). It
#   reads only its arguments and data.kcp_data, never input. docs/extending.md.
applies(profile, _) if is_number(profile.temporal.from_epoch_seconds)

applies(profile, _) if is_number(profile.temporal.until_epoch_seconds)

applies(profile, _) if {
	some entry in profile.not_for
	is_string(entry)
}

applies(profile, _) if profile.deprecated == true
