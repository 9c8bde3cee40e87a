package kcp.evaluators.access_test

import rego.v1

import data.kcp.evaluators.access

_auth := {"sensitivity": "internal", "requires_auth": true, "condition": 0, "source": "visibility.conditions[0] (first match)"}

_open := {"sensitivity": "internal", "requires_auth": false, "condition": null, "source": "visibility.default"}

_units := {"depth": 0, "count": 5, "slots": {"p": {
	"open": {"profile": 0},
	"authn": {"profile": 1},
	"scoped": {"profile": 2},
	"vis": {"profile": 3},
	"odd": {"profile": 4},
}}}

_profiles := [
	{"access": "public"},
	{"access": "authenticated"},
	{"access": "restricted", "auth_scope": "read:finance"},
	{"access": "public", "effective_visibility": {"needs": ["environment"], "cells": {"": {"": _open}, "production": {"": _auth}}, "incomplete": _auth}},
	{"access": "secret-ish"},
]

_codes(unit, authz, env) := {[f.code, f.state] | some f in fs} if {
	units := _units
	profiles := _profiles
	fs := access.findings with input.action as {"knowledge": {"project": "p", "unit": unit}, "authorization_context": authz, "runtime": {"environment": env}}
		with data.kcp_data.units as units with data.kcp_data.profiles as profiles
}

_detail(unit, authz) := [f.details | some f in fs] if {
	units := _units
	profiles := _profiles
	fs := access.findings with input.action as {"knowledge": {"project": "p", "unit": unit}, "authorization_context": authz}
		with data.kcp_data.units as units with data.kcp_data.profiles as profiles
}

test_public_needs_nothing if {
	count(_codes("open", {}, "dev")) == 0
}

test_authenticated_without_principal_denied if {
	_codes("authn", {"requested_by": "u"}, "dev") == {["access_unauthenticated", "DENY"]}
}

test_authenticated_with_principal_passes if {
	count(_codes("authn", {"authenticated_principal": "user:1"}, "dev")) == 0
}

test_empty_principal_is_no_principal if {
	_codes("authn", {"authenticated_principal": ""}, "dev") == {["access_unauthenticated", "DENY"]}
}

test_restricted_without_scope_names_it if {
	_codes("scoped", {"authenticated_principal": "user:1", "principal_scopes": ["read:hr"]}, "dev") == {["access_scope_missing", "DENY"]}
	some d in _detail("scoped", {"authenticated_principal": "user:1", "principal_scopes": ["read:hr"]})
	d.missing_scope == "read:finance"
}

test_restricted_with_scope_passes if {
	count(_codes("scoped", {"authenticated_principal": "user:1", "principal_scopes": ["read:hr", "read:finance"]}, "dev")) == 0
}

test_restricted_without_anything_denies_twice if {
	_codes("scoped", {}, "dev") == {["access_unauthenticated", "DENY"], ["access_scope_missing", "DENY"]}
}

test_visibility_requires_auth if {
	_codes("vis", {}, "production") == {["access_unauthenticated", "DENY"]}
	count(_codes("vis", {}, "dev")) == 0
	count(_codes("vis", {"authenticated_principal": "user:1"}, "production")) == 0
}

test_unknown_access_value_is_public if {
	count(_codes("odd", {}, "dev")) == 0
}

test_unknown_unit_no_access_finding if {
	count(_codes("nope", {}, "dev")) == 0
}
