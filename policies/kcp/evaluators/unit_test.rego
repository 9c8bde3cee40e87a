package kcp.evaluators.unit_test

import rego.v1

import data.kcp.evaluators.unit

_units := {"depth": 0, "count": 1, "slots": {"p": {"u": {"profile": 0}}}}

_profiles := [{}]

test_unknown_unit_is_denied if {
	units := _units
	profiles := _profiles
	knowledge := {"project": "p", "unit": "nope"}
	some f in unit.findings
		with input.action.knowledge as knowledge
		with data.kcp_data.units as units
		with data.kcp_data.profiles as profiles
	f.code == "unknown_unit"
	f.state == "DENY"
}

test_unknown_project_is_denied if {
	units := _units
	profiles := _profiles
	knowledge := {"project": "q", "unit": "u"}
	count(unit.findings) == 1
		with input.action.knowledge as knowledge
		with data.kcp_data.units as units
		with data.kcp_data.profiles as profiles
}

test_known_unit_has_no_finding if {
	units := _units
	profiles := _profiles
	knowledge := {"project": "p", "unit": "u"}
	count(unit.findings) == 0
		with input.action.knowledge as knowledge
		with data.kcp_data.units as units
		with data.kcp_data.profiles as profiles
}

test_unit_whose_profile_is_missing_is_denied if {
	units := {"depth": 0, "count": 1, "slots": {"p": {"u": {"profile": 1}}}}
	profiles := _profiles
	knowledge := {"project": "p", "unit": "u"}
	{f.code | some f in unit.findings} == {"unknown_unit"} with input.action.knowledge as knowledge
		with data.kcp_data.units as units with data.kcp_data.profiles as profiles
}

test_action_without_knowledge_has_no_finding if {
	units := _units
	profiles := _profiles
	count(unit.findings) == 0
		with input.action as {"action_type": "payment"}
		with data.kcp_data.units as units
		with data.kcp_data.profiles as profiles
}
