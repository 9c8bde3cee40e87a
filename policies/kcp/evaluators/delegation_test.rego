package kcp.evaluators.delegation_test

import rego.v1

import data.kcp.evaluators.delegation

_units := {"depth": 0, "count": 2, "slots": {"p": {
	"strict": {"profile": 0},
	"loose": {"profile": 1},
}}}

_profiles := [
	{"delegation": {"max_depth": 2, "require_capability_attenuation": true}},
	{"delegation": {"max_depth": null, "require_capability_attenuation": false}},
]

test_covered_by_prefix if {
	delegation.covered("read:case:summary", "read:case")
	delegation.covered("read", "read")
	not delegation.covered("read:casefile", "read:case")
	not delegation.covered("write", "read")
}

test_too_deep_denied if {
	units := _units
	profiles := _profiles
	chain := [{"agent_id": "a", "capabilities": ["read"]}, {"agent_id": "b", "capabilities": ["read"]}, {"agent_id": "c", "capabilities": ["read"]}]
	codes := {f.code | some f in delegation.findings} with input.action.knowledge as {"project": "p", "unit": "strict"}
		with input.action.delegation_chain as chain
		with data.kcp_data.units as units with data.kcp_data.profiles as profiles
	codes == {"delegation_too_deep"}
}

test_widening_denied if {
	units := _units
	profiles := _profiles
	chain := [{"agent_id": "a", "capabilities": ["read:case"]}, {"agent_id": "b", "capabilities": ["read:case:summary", "write"]}]
	some f in delegation.findings with input.action.knowledge as {"project": "p", "unit": "strict"}
		with input.action.delegation_chain as chain
		with data.kcp_data.units as units with data.kcp_data.profiles as profiles
	f.code == "capability_widened"
	f.details.hops == [{"hop": 2, "agent_id": "b", "capability": "write"}]
}

test_attenuating_chain_passes if {
	units := _units
	profiles := _profiles
	chain := [{"agent_id": "a", "capabilities": ["read:case", "write"]}, {"agent_id": "b", "capabilities": ["read:case:summary"]}]
	count(delegation.findings) == 0 with input.action.knowledge as {"project": "p", "unit": "strict"}
		with input.action.delegation_chain as chain
		with data.kcp_data.units as units with data.kcp_data.profiles as profiles
}

test_unlimited_depth_and_no_attenuation if {
	units := _units
	profiles := _profiles
	chain := [{"agent_id": "a", "capabilities": ["read"]}, {"agent_id": "b", "capabilities": ["write"]}, {"agent_id": "c", "capabilities": ["x"]}]
	count(delegation.findings) == 0 with input.action.knowledge as {"project": "p", "unit": "loose"}
		with input.action.delegation_chain as chain
		with data.kcp_data.units as units with data.kcp_data.profiles as profiles
}
