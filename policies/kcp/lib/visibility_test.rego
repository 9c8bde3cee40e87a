package kcp.lib.visibility_test

import rego.v1

import data.kcp.lib.visibility

# Compiled from (kcp_opa/declare/governance.py):
#   visibility: {default: internal, conditions: [
#     {when: {environment: production}, then: {sensitivity: confidential, requires_auth: true}},
#     {when: {agent_role: [auditor]}, then: {sensitivity: restricted}},
#     {when: {environment: production, agent_role: auditor}, then: {sensitivity: public}}]}
_cond0 := {
	"sensitivity": "confidential",
	"requires_auth": true,
	"condition": 0,
	"source": "visibility.conditions[0] (first match)",
}

_cond1 := {
	"sensitivity": "restricted",
	"requires_auth": false,
	"condition": 1,
	"source": "visibility.conditions[1] (first match)",
}

_default := {"sensitivity": "internal", "requires_auth": false, "condition": null, "source": "visibility.default"}

_visible := {
	"needs": ["agent_role", "environment"],
	"cells": {
		"": {"": _default, "auditor": _cond1},
		"production": {"": _cond0, "auditor": _cond0},
	},
	"incomplete": {
		"sensitivity": "restricted",
		"requires_auth": true,
		"condition": null,
		"source": "strictest branch (a condition's input is missing)",
	},
}

_units := {
	"depth": 0,
	"count": 3,
	"slots": {"p": {"vis": {"profile": 0}, "flat": {"profile": 1}, "old": {"profile": 2}}},
}

_profiles := [
	{"sensitivity": "public", "effective_visibility": _visible},
	{
		"sensitivity": "internal",
		"effective_visibility": {"needs": [], "cells": {"": {"": _default}}, "incomplete": _default},
	},
	{"sensitivity": "public"},
]

_view(unit, env, role) := v if {
	units := _units
	profiles := _profiles
	# Environment and role are gate facts (kcp.lib.trusted): the gate's values, in input.context.facts.
	envs := {k: {"value": env} | k := "environment"; env != null}
	roles := {k: {"value": role} | k := "actor_role"; role != null}
	v := visibility.view with input.action as {"knowledge": {"project": "p", "unit": unit}}
		with input.context.facts as object.union(envs, roles)
		with data.kcp_data.units as units with data.kcp_data.profiles as profiles
}

test_unlisted_values_take_the_default if {
	v := _view("vis", "staging", "reader")
	v.sensitivity == "internal"
	v.condition == null
	v.requires_auth == false
}

test_first_match_on_environment if {
	v := _view("vis", "production", "reader")
	v.sensitivity == "confidential"
	v.condition == 0
	v.requires_auth == true
}

test_first_match_on_role if {
	_view("vis", "staging", "auditor").condition == 1
	_view("vis", "staging", "auditor").sensitivity == "restricted"
}

test_first_match_wins_over_a_later_one if {
	# conditions 0, 1 and 2 all match production + auditor: the first wins.
	_view("vis", "production", "auditor").condition == 0
}

test_missing_input_takes_the_strictest_branch if {
	v := _view("vis", null, "reader")
	v.sensitivity == "restricted"
	v.requires_auth == true
	v.condition == null
}

test_flat_sensitivity_without_a_block if {
	_view("flat", "production", "auditor").sensitivity == "internal"
}

test_profile_without_effective_visibility_is_undeclared if {
	_view("old", "production", null).sensitivity == "undeclared"
}

test_unknown_unit_has_no_view if {
	_view("nope", "production", null) == null
}
