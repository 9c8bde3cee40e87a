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

# declared_fields_by_task_type: the action type's list replaces declared_fields; other types keep it.
_by_task_profiles := [
	{"compliance": {"declared_fields": ["email", "name", "subject"], "declared_fields_by_task_type": {
		"read": ["subject"],
		"summarize": [],
	}}},
	{"compliance": {"declared_fields": null}},
]

test_a_listed_task_type_reads_only_its_list if {
	units := _units
	profiles := _by_task_profiles
	knowledge := {"project": "p", "unit": "min", "fields_read": ["subject", "email"]}
	some f in field_access.findings
		with input.action.knowledge as knowledge
		with input.action.action_type as "read"
		with data.kcp_data.units as units
		with data.kcp_data.profiles as profiles
	f.code == "field_access_violation"
	f.details.fields == ["email"]
	f.details.fields_declared == ["subject"]
	f.details.declared_in == "declared_fields_by_task_type.read"
	f.message == "fields read outside declared_fields_by_task_type.read: email"
}

test_a_listed_task_type_within_its_list_is_fine if {
	units := _units
	profiles := _by_task_profiles
	knowledge := {"project": "p", "unit": "min", "fields_read": ["subject"]}
	count(field_access.findings) == 0
		with input.action.knowledge as knowledge
		with input.action.action_type as "read"
		with data.kcp_data.units as units
		with data.kcp_data.profiles as profiles
}

test_an_empty_task_list_admits_no_field if {
	units := _units
	profiles := _by_task_profiles
	knowledge := {"project": "p", "unit": "min", "fields_read": ["subject"]}
	some f in field_access.findings
		with input.action.knowledge as knowledge
		with input.action.action_type as "summarize"
		with data.kcp_data.units as units
		with data.kcp_data.profiles as profiles
	f.details.fields == ["subject"]
}

test_an_unlisted_task_type_keeps_declared_fields if {
	units := _units
	profiles := _by_task_profiles
	knowledge := {"project": "p", "unit": "min", "fields_read": ["email", "name"]}
	count(field_access.findings) == 0
		with input.action.knowledge as knowledge
		with input.action.action_type as "send"
		with data.kcp_data.units as units
		with data.kcp_data.profiles as profiles
}

test_an_unlisted_task_type_outside_declared_fields_is_denied if {
	units := _units
	profiles := _by_task_profiles
	knowledge := {"project": "p", "unit": "min", "fields_read": ["phone"]}
	some f in field_access.findings
		with input.action.knowledge as knowledge
		with input.action.action_type as "send"
		with data.kcp_data.units as units
		with data.kcp_data.profiles as profiles
	f.details.declared_in == "declared_fields"
	f.details.fields_declared == ["email", "name", "subject"]
}

test_a_listed_task_type_without_fields_read_is_denied if {
	units := _units
	profiles := _by_task_profiles
	knowledge := {"project": "p", "unit": "min"}
	some f in field_access.findings
		with input.action.knowledge as knowledge
		with input.action.action_type as "read"
		with data.kcp_data.units as units
		with data.kcp_data.profiles as profiles
	f.code == "fields_read_missing"
	f.details.fields_declared == ["subject"]
}

test_applies_with_a_task_list_alone if {
	profile := {"compliance": {"declared_fields": null, "declared_fields_by_task_type": {"read": []}}}
	field_access.applies(profile, "read")
	not field_access.applies(profile, "send")
}
