package kcp.evaluators.access_test

import rego.v1

import data.kcp.evaluators.access

_auth := {
	"sensitivity": "internal",
	"requires_auth": true,
	"condition": 0,
	"source": "visibility.conditions[0] (first match)",
}

_open := {"sensitivity": "internal", "requires_auth": false, "condition": null, "source": "visibility.default"}

_units := {"depth": 0, "count": 6, "slots": {"p": {
	"open": {"profile": 0},
	"authn": {"profile": 1},
	"scoped": {"profile": 2},
	"vis": {"profile": 3},
	"odd": {"profile": 4},
	"authn-scoped": {"profile": 5},
}}}

_profiles := [
	{"access": "public"},
	{"access": "authenticated"},
	{"access": "restricted", "auth_scope": "read:finance"},
	{
		"access": "public",
		"effective_visibility": {
			"needs": ["environment"],
			"cells": {"": {"": _open}, "production": {"": _auth}},
			"incomplete": _auth,
		},
	},
	{"access": "secret-ish"},
	{"access": "authenticated", "auth_scope": "read:finance"},
]

_access_codes(unit, authz, env) := {[f.code, f.state] | some f in fs} if {
	units := _units
	profiles := _profiles
	fs := access.findings
		with input.action as {"knowledge": {"project": "p", "unit": unit}, "authorization_context": authz}
		with input.context.facts as {"environment": {"value": env}}
		with data.kcp_data.units as units with data.kcp_data.profiles as profiles
}

_access_detail(unit, authz) := [f.details | some f in fs] if {
	units := _units
	profiles := _profiles
	fs := access.findings
		with input.action as {"knowledge": {"project": "p", "unit": unit}, "authorization_context": authz}
		with data.kcp_data.units as units with data.kcp_data.profiles as profiles
}

# Every scenario goes through one call site: regopy plans each call of a helper that mocks
# data anew (docs/engine-findings.md item 27), and this keeps `kcp-opa check` inside its budget.
_p := {"authenticated_principal": "user:1"}

_scenarios := {
	"public": ["open", {}, "dev"],
	"authn_none": ["authn", {"requested_by": "u"}, "dev"],
	"authn_ok": ["authn", _p, "dev"],
	"authn_empty": ["authn", {"authenticated_principal": ""}, "dev"],
	"scope_wrong": ["scoped", {"authenticated_principal": "user:1", "principal_scopes": ["read:hr"]}, "dev"],
	"scope_ok": ["scoped", {"authenticated_principal": "user:1", "principal_scopes": ["read:hr", "read:finance"]}, "dev"],
	"scope_nothing": ["scoped", {}, "dev"],
	"vis_prod_none": ["vis", {}, "production"],
	"vis_dev_none": ["vis", {}, "dev"],
	"vis_prod_ok": ["vis", _p, "production"],
	"odd": ["odd", {}, "dev"],
	"unknown": ["nope", {}, "dev"],
	"authn_number": ["authn", {"authenticated_principal": 5}, "dev"],
	"authn_scoped": ["authn-scoped", _p, "dev"],
}

_outcomes := {name: codes |
	sc := _scenarios[name]
	codes := _access_codes(sc[0], sc[1], sc[2])
}

test_public_needs_nothing if {
	count(_outcomes.public) == 0
}

test_authenticated_without_principal_denied if {
	_outcomes.authn_none == {["access_unauthenticated", "DENY"]}
}

test_authenticated_with_principal_passes if {
	count(_outcomes.authn_ok) == 0
}

test_empty_principal_is_no_principal if {
	_outcomes.authn_empty == {["access_unauthenticated", "DENY"]}
}

test_restricted_without_scope_names_it if {
	_outcomes.scope_wrong == {["access_scope_missing", "DENY"]}
	some d in _access_detail("scoped", {"authenticated_principal": "user:1", "principal_scopes": ["read:hr"]})
	d.missing_scope == "read:finance"
}

test_restricted_with_scope_passes if {
	count(_outcomes.scope_ok) == 0
}

test_restricted_without_anything_denies_twice if {
	_outcomes.scope_nothing == {["access_unauthenticated", "DENY"], ["access_scope_missing", "DENY"]}
}

test_visibility_requires_auth if {
	_outcomes.vis_prod_none == {["access_unauthenticated", "DENY"]}
	count(_outcomes.vis_dev_none) == 0
	count(_outcomes.vis_prod_ok) == 0
}

test_unknown_access_value_is_public if {
	count(_outcomes.odd) == 0
}

test_unknown_unit_no_access_finding if {
	count(_outcomes.unknown) == 0
}

test_a_principal_that_is_not_a_string_is_no_principal if {
	_outcomes.authn_number == {["access_unauthenticated", "DENY"]}
}

test_auth_scope_binds_only_restricted_units if {
	# auth_scope without access: restricted (validate warns) asks for a principal, not the scope.
	count(_outcomes.authn_scoped) == 0
}
