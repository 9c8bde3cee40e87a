package kcp.evaluators.field_access_test

import rego.v1

import data.kcp.evaluators.field_access

_units := {"depth": 0, "count": 2, "slots": {"p": {
	"min": {"profile": 0},
	"open": {"profile": 1},
}}}

_profiles := [
	{"compliance": {"declared_fields": ["email", "name"]}},
	{"compliance": {"declared_fields": null}},
]

test_reading_phone_is_denied_with_the_violation if {
	units := _units
	profiles := _profiles
	knowledge := {"project": "p", "unit": "min", "fields_read": ["email", "name", "phone"]}
	some f in field_access.findings
		with input.action.knowledge as knowledge
		with data.kcp_data.units as units
		with data.kcp_data.profiles as profiles
	f.code == "field_access_violation"
	f.state == "DENY"
	f.details.fields == ["phone"]
}

# Sorted, each once, a name that is also a prefix of another ("a" before "a.b", "a:" after).
test_violations_are_sorted_and_listed_once if {
	units := _units
	profiles := _profiles
	knowledge := {"project": "p", "unit": "min", "fields_read": ["zeta", "a:", "name", "a.b", "zeta", "a", "B", "_x"]}
	some f in field_access.findings
		with input.action.knowledge as knowledge
		with data.kcp_data.units as units
		with data.kcp_data.profiles as profiles
	f.details.fields == ["B", "_x", "a", "a.b", "a:", "zeta"]
	f.message == "fields read outside declared_fields: B, _x, a, a.b, a:, zeta"
}

test_declared_fields_only_is_fine if {
	units := _units
	profiles := _profiles
	knowledge := {"project": "p", "unit": "min", "fields_read": ["name", "email", "email"]}
	count(field_access.findings) == 0
		with input.action.knowledge as knowledge
		with data.kcp_data.units as units
		with data.kcp_data.profiles as profiles
}

test_missing_fields_read_is_denied if {
	units := _units
	profiles := _profiles
	knowledge := {"project": "p", "unit": "min"}
	some f in field_access.findings
		with input.action.knowledge as knowledge
		with data.kcp_data.units as units
		with data.kcp_data.profiles as profiles
	f.code == "fields_read_missing"
}

test_unit_without_declaration_has_no_finding if {
	units := _units
	profiles := _profiles
	knowledge := {"project": "p", "unit": "open", "fields_read": ["anything"]}
	count(field_access.findings) == 0
		with input.action.knowledge as knowledge
		with data.kcp_data.units as units
		with data.kcp_data.profiles as profiles
}

test_a_field_that_is_not_an_identifier_is_outside_the_declaration if {
	units := _units
	profiles := _profiles
	knowledge := {"project": "p", "unit": "min", "fields_read": ["email", `name","email`]}
	some f in field_access.findings
		with input.action.knowledge as knowledge
		with data.kcp_data.units as units
		with data.kcp_data.profiles as profiles
	f.code == "field_access_violation"
	f.details.fields == ["(a name that is not an identifier)"]
}

test_a_declaration_listing_the_placeholder_does_not_admit_a_non_identifier if {
	units := _units
	profiles := [{"compliance": {"declared_fields": ["email", "(a name that is not an identifier)"]}}, {}]
	knowledge := {"project": "p", "unit": "min", "fields_read": ["email", "x y"]}
	some f in field_access.findings
		with input.action.knowledge as knowledge
		with data.kcp_data.units as units
		with data.kcp_data.profiles as profiles
	f.code == "field_access_violation"
}

test_a_unit_without_a_declaration_restricts_no_field_name if {
	units := _units
	profiles := _profiles
	knowledge := {"project": "p", "unit": "open", "fields_read": ["x y"]}
	count(field_access.findings) == 0
		with input.action.knowledge as knowledge
		with data.kcp_data.units as units
		with data.kcp_data.profiles as profiles
}
