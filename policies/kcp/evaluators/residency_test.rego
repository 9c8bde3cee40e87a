package kcp.evaluators.residency_test

import rego.v1

import data.kcp.evaluators.residency

_units := {"depth": 0, "count": 3, "slots": {"p": {
	"eea": {"profile": 0},
	"anywhere": {"profile": 1},
	"free": {"profile": 2},
}}}

_profiles := [
	{"compliance": {"data_residency": ["EEA"], "restrictions": ["no-cross-border"]}},
	{"compliance": {"data_residency": ["global"], "restrictions": []}},
	{"compliance": {"data_residency": null, "restrictions": []}},
]

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
