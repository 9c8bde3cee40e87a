package kcp.evaluators.residency_test

import rego.v1

import data.kcp.evaluators.residency

_units := {"depth": 0, "count": 3, "slots": {"p": {
	"eea": {"id": "eea", "compliance": {"data_residency": ["EEA"], "restrictions": ["no-cross-border"]}},
	"anywhere": {"id": "anywhere", "compliance": {"data_residency": ["global"], "restrictions": []}},
	"free": {"id": "free", "compliance": {"data_residency": null, "restrictions": []}},
}}}

test_region_outside_residency_is_denied if {
	units := _units
	codes := {f.code | some f in residency.findings} with input.action.knowledge as {"project": "p", "unit": "eea"}
		with input.action.runtime as {"deployment_region": "US"}
		with input.action.target.country as "EU"
		with data.kcp_data.units as units
	codes == {"residency_violation"}
}

test_eu_inside_eea if {
	units := _units
	count(residency.findings) == 0 with input.action.knowledge as {"project": "p", "unit": "eea"}
		with input.action.runtime as {"deployment_region": "EU"}
		with input.action.target as {"type": "customer_record", "country": "EU"}
		with data.kcp_data.units as units
}

test_missing_region_is_denied if {
	units := _units
	codes := {f.code | some f in residency.findings} with input.action.knowledge as {"project": "p", "unit": "eea"}
		with input.action.target.country as "EU"
		with data.kcp_data.units as units
	codes == {"residency_unverifiable"}
}

test_no_cross_border_without_a_target_location_is_denied if {
	units := _units
	found := residency.findings with input.action.knowledge as {"project": "p", "unit": "eea"}
		with input.action.runtime as {"deployment_region": "EEA"}
		with data.kcp_data.units as units
	some f in found
	f.code == "cross_border_transfer"
	f.details.target == "(not stated)"
}

test_cross_border_target_is_denied if {
	units := _units
	codes := {f.code | some f in residency.findings} with input.action.knowledge as {"project": "p", "unit": "eea"}
		with input.action.runtime as {"deployment_region": "EEA"}
		with input.action.target as {"type": "email", "country": "SG"}
		with data.kcp_data.units as units
	codes == {"cross_border_transfer"}
}

test_global_admits_all_and_no_residency_checks_nothing if {
	units := _units
	count(residency.findings) == 0 with input.action.knowledge as {"project": "p", "unit": "anywhere"}
		with input.action.runtime as {"deployment_region": "US"}
		with data.kcp_data.units as units
	count(residency.findings) == 0 with input.action.knowledge as {"project": "p", "unit": "free"}
		with data.kcp_data.units as units
}
