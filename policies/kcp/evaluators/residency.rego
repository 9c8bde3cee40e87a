# METADATA
# title: Data residency and cross-border transfer
# description: |
#   The deployment region must lie inside the unit's data_residency; under no-cross-border
#   the target's country (or, when it states none, its region) must too. A place is inside
#   when the residency lists it, when the region table (kcp_data/deployment/regions) places
#   the country in a listed region (DE in EU; NO in EEA, not in EU), or when it is a region
#   inside a listed one (EU in EEA); "global" admits every place. The compiler expands each
#   profile's residency into compliance.residency_places, so this is one key lookup. The
#   region is the gate's (input.context.facts, kcp.lib.trusted); a region the action states
#   is checked too, so it can only make the decision stricter. A residency the gate cannot
#   check (it does not know its region) denies.
# custom:
#   evaluator_id: residency_check
#   evaluator_version: "1.1.0"
package kcp.evaluators.residency

import rego.v1

import data.kcp.lib.facts
import data.kcp.lib.trusted

_regions := facts.profile.compliance.data_residency

# The codes the residency admits, compiled from data_residency and the region table
# (kcp_opa/declare/regions.py); a profile without them (hand-edited data) admits nothing.
_places := facts.profile.compliance.residency_places

# METADATA
# title: Place outside the unit's residency
# description: |
#   Neither a key of the compiled places nor under "global": two key lookups, never a scan of
#   the region table (a negative helper: a two-body positive function cost ~100 us more on regopy).
outside(place) if {
	not _places[place]
	not _places.global
}

# METADATA
# title: Findings
# custom:
#   requires: [input.action.knowledge.unit]
#   facts: {deployment_region: gate}
#   absent: "region absent: residency_unverifiable"
findings contains finding if {
	is_array(_regions)
	some region in _candidates
	is_string(region)
	outside(region)
	text1 := concat("", ["deployment region ", region, " is outside data_residency [", concat(", ", _regions), "]"])
	finding := {
		"code": "residency_violation",
		"rule": "kcp.compliance.data_residency",
		"state": "DENY",
		"controls": [],
		"message": text1,
		"details": {"region": region, "data_residency": _regions},
	}
}

# METADATA
# custom:
#   requires: [input.action.knowledge.unit]
#   facts: {deployment_region: gate}
#   absent: "residency_unverifiable (this rule)"
findings contains finding if {
	is_array(_regions)
	not _region_given
	finding := {
		"code": "residency_unverifiable",
		"rule": "kcp.compliance.data_residency",
		"state": "DENY",
		"controls": [],
		"message": concat("", [
			"the unit declares data_residency but the gate does not know its deployment region ",
			"(input.context.facts.deployment_region)",
		]),
		"details": {"data_residency": _regions},
	}
}

# `not is_string(undefined)` differs between the engines: test a named rule instead.
_region_given if "deployment_region" in trusted.established

_candidates := object.get(trusted.candidates, "deployment_region", set())

# METADATA
# custom:
#   requires: [input.action.knowledge.unit]
#   absent: "target place absent: the literal (no target location), never admitted"
findings contains finding if {
	facts.restricted("no-cross-border")
	is_array(_regions)
	outside(_target_place)
	text1 := concat("", [
		"no-cross-border: target ",
		_target_place,
		" is outside data_residency [",
		concat(", ", _regions),
		"]",
	])
	finding := {
		"code": "cross_border_transfer",
		"rule": "kcp.restrictions.no-cross-border",
		"state": "DENY",
		"controls": [],
		"message": text1,
		"details": {"target": _target_place, "data_residency": _regions},
	}
}

_target_place := input.action.target.country

_target_place := input.action.target.region if {
	not input.action.target.country
	is_string(input.action.target.region)
}

# no-cross-border needs to know where the data goes: an action that does not say is denied.
_target_place := "(not stated)" if {
	not input.action.target.country
	not input.action.target.region
}

# Message parts are total (a default when the value is missing): a message built from an
# undefined value would make the whole finding undefined and drop a DENY (fail open). Messages
# use concat, never sprintf over strings (docs/engine-findings.md items 13 and 19).

# METADATA
# title: Applies (the decision plan, compile time)
# description: |
#   Whether this evaluator can find anything (or owe an obligation) for a unit of `profile` and an
#   action of type `task`, from declarations alone. `kcp-opa compile` evaluates it over every
#   profile and every action type the matrix names into the bundle's decision plan; a decision
#   reaches this evaluator only when its plan row names it (kcp.gate.planned). It may
#   over-approximate (a needless visit costs time) but never miss (a miss skips a finding). It
#   reads only its arguments and data.kcp_data, never input. docs/extending.md.
applies(profile, _) if is_array(profile.compliance.data_residency)
