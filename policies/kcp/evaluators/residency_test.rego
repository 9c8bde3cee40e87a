package kcp.evaluators.residency_test

import rego.v1

import data.kcp.evaluators.residency

_units := {"depth": 0, "count": 5, "slots": {"p": {
	"eea": {"profile": 0},
	"anywhere": {"profile": 1},
	"free": {"profile": 2},
	"eu": {"profile": 3},
	"unplaced": {"profile": 4},
}}}

# What the compiler makes of [EEA] and [EU] (kcp_opa/declare/regions.py residency_places; a Python
# test checks these are its output).
_eea_places := {
	"AT": true, "BE": true, "BG": true, "CY": true, "CZ": true, "DE": true, "DK": true, "EE": true,
	"EEA": true, "ES": true, "EU": true, "FI": true, "FR": true, "GR": true, "HR": true, "HU": true,
	"IE": true, "IS": true, "IT": true, "LI": true, "LT": true, "LU": true, "LV": true, "MT": true,
	"NL": true, "NO": true, "PL": true, "PT": true, "RO": true, "SE": true, "SI": true, "SK": true,
}

_eu_places := {
	"AT": true, "BE": true, "BG": true, "CY": true, "CZ": true, "DE": true, "DK": true, "EE": true,
	"ES": true, "EU": true, "FI": true, "FR": true, "GR": true, "HR": true, "HU": true, "IE": true,
	"IT": true, "LT": true, "LU": true, "LV": true, "MT": true, "NL": true, "PL": true, "PT": true,
	"RO": true, "SE": true, "SI": true, "SK": true,
}

_profiles := [
	{"compliance": {"data_residency": ["EEA"], "residency_places": _eea_places, "restrictions": ["no-cross-border"]}},
	{"compliance": {"data_residency": ["global"], "residency_places": {"global": true}, "restrictions": []}},
	{"compliance": {"data_residency": null, "restrictions": []}},
	{"compliance": {"data_residency": ["EU"], "residency_places": _eu_places, "restrictions": ["no-cross-border"]}},
	{"compliance": {"data_residency": ["EU"], "restrictions": ["no-cross-border"]}},
]

_region_fact(region) := {"deployment_region": {"value": region, "class": "gate", "source": "test"}}

_residency_codes(unit, region, target) := codes if {
	units := _units
	profiles := _profiles
	found := residency.findings with input.action.knowledge as {"project": "p", "unit": unit}
		with input.context.facts as _region_fact(region)
		with input.action.target as target
		with data.kcp_data.units as units with data.kcp_data.profiles as profiles
	codes := {f.code | some f in found}
}

test_region_outside_residency_is_denied if {
	units := _units
	profiles := _profiles
	codes := {f.code | some f in residency.findings} with input.action.knowledge as {"project": "p", "unit": "eea"}
		with input.context.facts as {"deployment_region": {"value": "US", "class": "gate", "source": "test"}}
		with input.action.target.country as "EU"
		with data.kcp_data.units as units with data.kcp_data.profiles as profiles
	codes == {"residency_violation"}
}

test_eu_inside_eea if {
	units := _units
	profiles := _profiles
	count(residency.findings) == 0 with input.action.knowledge as {"project": "p", "unit": "eea"}
		with input.context.facts as {"deployment_region": {"value": "EU", "class": "gate", "source": "test"}}
		with input.action.target as {"type": "customer_record", "country": "EU"}
		with data.kcp_data.units as units with data.kcp_data.profiles as profiles
}

test_missing_region_is_denied if {
	units := _units
	profiles := _profiles
	codes := {f.code | some f in residency.findings} with input.action.knowledge as {"project": "p", "unit": "eea"}
		with input.action.target.country as "EU"
		with data.kcp_data.units as units with data.kcp_data.profiles as profiles
	codes == {"residency_unverifiable"}
}

test_no_cross_border_without_a_target_location_is_denied if {
	units := _units
	profiles := _profiles
	found := residency.findings with input.action.knowledge as {"project": "p", "unit": "eea"}
		with input.context.facts as {"deployment_region": {"value": "EEA", "class": "gate", "source": "test"}}
		with data.kcp_data.units as units with data.kcp_data.profiles as profiles
	some f in found
	f.code == "cross_border_transfer"
	f.details.target == "(not stated)"
}

test_cross_border_target_is_denied if {
	units := _units
	profiles := _profiles
	codes := {f.code | some f in residency.findings} with input.action.knowledge as {"project": "p", "unit": "eea"}
		with input.context.facts as {"deployment_region": {"value": "EEA", "class": "gate", "source": "test"}}
		with input.action.target as {"type": "email", "country": "SG"}
		with data.kcp_data.units as units with data.kcp_data.profiles as profiles
	codes == {"cross_border_transfer"}
}

test_global_admits_all_and_no_residency_checks_nothing if {
	units := _units
	profiles := _profiles
	count(residency.findings) == 0 with input.action.knowledge as {"project": "p", "unit": "anywhere"}
		with input.context.facts as {"deployment_region": {"value": "US", "class": "gate", "source": "test"}}
		with data.kcp_data.units as units with data.kcp_data.profiles as profiles
	count(residency.findings) == 0 with input.action.knowledge as {"project": "p", "unit": "free"}
		with data.kcp_data.units as units with data.kcp_data.profiles as profiles
}

test_a_country_the_table_places_in_a_listed_region_is_inside if {
	_residency_codes("eu", "EU", {"type": "email", "country": "DE"}) == set()
	_residency_codes("eea", "EEA", {"type": "email", "country": "DE"}) == set()
}

test_norway_is_inside_the_eea_and_outside_the_eu if {
	_residency_codes("eea", "EEA", {"type": "email", "country": "NO"}) == set()
	_residency_codes("eu", "EU", {"type": "email", "country": "NO"}) == {"cross_border_transfer"}
}

test_the_whole_finding_for_a_country_outside_the_residency if {
	units := _units
	profiles := _profiles
	found := residency.findings with input.action.knowledge as {"project": "p", "unit": "eu"}
		with input.context.facts as _region_fact("EU")
		with input.action.target as {"type": "email", "country": "NO"}
		with data.kcp_data.units as units with data.kcp_data.profiles as profiles
	found == {{
		"code": "cross_border_transfer",
		"rule": "kcp.restrictions.no-cross-border",
		"state": "DENY",
		"controls": [],
		"message": "no-cross-border: target NO is outside data_residency [EU]",
		"details": {"target": "NO", "data_residency": ["EU"]},
	}}
}

test_a_country_no_table_entry_places_is_outside if {
	_residency_codes("eu", "EU", {"type": "email", "country": "QQ"}) == {"cross_border_transfer"}
	_residency_codes("eea", "EEA", {"type": "email", "country": "QQ"}) == {"cross_border_transfer"}
	# Codes are ISO 3166-1 alpha-2, upper case: a lower-case code is no country the table knows.
	_residency_codes("eu", "EU", {"type": "email", "country": "de"}) == {"cross_border_transfer"}
}

test_a_listed_region_is_inside_as_the_target_region if {
	_residency_codes("eu", "EU", {"type": "email", "region": "EU"}) == set()
	_residency_codes("eea", "EEA", {"type": "email", "region": "EU"}) == set()
	_residency_codes("eu", "EU", {"type": "email", "region": "EEA"}) == {"cross_border_transfer"}
	_residency_codes("eu", "EU", {"type": "email", "region": "APAC"}) == {"cross_border_transfer"}
}

test_the_country_decides_when_the_target_states_both if {
	_residency_codes("eu", "EU", {"type": "email", "country": "US", "region": "EU"}) == {"cross_border_transfer"}
	_residency_codes("eu", "EU", {"type": "email", "country": "DE", "region": "us-east-1"}) == set()
}

test_the_deployment_region_is_read_against_the_table_too if {
	_residency_codes("eu", "DE", {"type": "email", "country": "FR"}) == set()
	_residency_codes("eea", "NO", {"type": "email", "country": "FR"}) == set()
	_residency_codes("eu", "NO", {"type": "email", "country": "FR"}) == {"residency_violation"}
}

test_a_profile_without_compiled_places_admits_nothing if {
	codes := _residency_codes("unplaced", "EU", {"type": "email", "country": "EU"})
	codes == {"residency_violation", "cross_border_transfer"}
}
