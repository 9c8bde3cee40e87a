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

_widened(chain) := widened if {
	widened := delegation.widened with input.action.delegation_chain as chain
}

test_covered_means_equal_or_narrower_by_a_colon_suffix if {
	chain := [
		{"agent_id": "a", "capabilities": ["read:case", "read", "x:"]},
		{
			"agent_id": "b",
			"capabilities": ["read:case:summary", "read", "read:casefile", "x::y", "x", "write", "read:case:summary"],
		},
	]
	_widened(chain) == [
		{"hop": 2, "agent_id": "b", "capability": "write"},
		{"hop": 2, "agent_id": "b", "capability": "x"},
	]
}

test_each_hop_is_held_to_the_previous_hop_in_hop_order if {
	chain := [
		{"agent_id": "a", "capabilities": ["read"]},
		{"agent_id": "b", "capabilities": ["read:case"]},
		{"agent_id": "c", "capabilities": ["read", "read:case:x"]},
		{"agent_id": "d", "capabilities": []},
		{"agent_id": "e", "capabilities": ["z", "b"]},
	]
	_widened(chain) == [
		{"hop": 3, "agent_id": "c", "capability": "read"},
		{"hop": 5, "agent_id": "e", "capability": "b"},
		{"hop": 5, "agent_id": "e", "capability": "z"},
	]
}

test_the_finding_carries_one_entry_a_widening_hop if {
	chain := [
		{"agent_id": "a", "capabilities": ["read"]},
		{"agent_id": "b", "capabilities": ["read:case", "write", "admin"]},
		{"agent_id": "c", "capabilities": ["read:case:x"]},
		{"agent_id": "d", "capabilities": ["z"]},
	]
	hops := delegation.widening_hops with input.action.delegation_chain as chain
	hops == [
		{"hop": 2, "agent_id": "b", "capabilities": ["admin", "write"]},
		{"hop": 4, "agent_id": "d", "capabilities": ["z"]},
	]
}

test_no_chain_and_one_hop_widen_nothing if {
	_widened([]) == []
	_widened([{"agent_id": "a", "capabilities": ["anything"]}]) == []
}

test_too_deep_denied if {
	units := _units
	profiles := _profiles
	chain := [
		{"agent_id": "a", "capabilities": ["read"]},
		{"agent_id": "b", "capabilities": ["read"]},
		{"agent_id": "c", "capabilities": ["read"]},
	]
	codes := {f.code | some f in delegation.findings} with input.action.knowledge as {"project": "p", "unit": "strict"}
		with input.action.delegation_chain as chain
		with data.kcp_data.units as units with data.kcp_data.profiles as profiles
	codes == {"delegation_too_deep"}
}

test_widening_denied if {
	units := _units
	profiles := _profiles
	chain := [
		{"agent_id": "a", "capabilities": ["read:case"]},
		{"agent_id": "b", "capabilities": ["read:case:summary", "write"]},
	]
	some f in delegation.findings with input.action.knowledge as {"project": "p", "unit": "strict"}
		with input.action.delegation_chain as chain
		with data.kcp_data.units as units with data.kcp_data.profiles as profiles
	f.code == "capability_widened"
	f.details.hops == [{"hop": 2, "agent_id": "b", "capabilities": ["write"]}]
}

test_attenuating_chain_passes if {
	units := _units
	profiles := _profiles
	chain := [
		{"agent_id": "a", "capabilities": ["read:case", "write"]},
		{"agent_id": "b", "capabilities": ["read:case:summary"]},
	]
	count(delegation.findings) == 0 with input.action.knowledge as {"project": "p", "unit": "strict"}
		with input.action.delegation_chain as chain
		with data.kcp_data.units as units with data.kcp_data.profiles as profiles
}

test_unlimited_depth_and_no_attenuation if {
	units := _units
	profiles := _profiles
	chain := [
		{"agent_id": "a", "capabilities": ["read"]},
		{"agent_id": "b", "capabilities": ["write"]},
		{"agent_id": "c", "capabilities": ["x"]},
	]
	count(delegation.findings) == 0 with input.action.knowledge as {"project": "p", "unit": "loose"}
		with input.action.delegation_chain as chain
		with data.kcp_data.units as units with data.kcp_data.profiles as profiles
}

test_a_capability_that_is_not_an_identifier_never_covers_or_passes if {
	granted := [{"agent_id": "a", "capabilities": ["read,write"]}, {"agent_id": "b", "capabilities": ["write:x"]}]
	_widened(granted) == [{"hop": 2, "agent_id": "b", "capability": "write:x"}]
	asked := [{"agent_id": "a", "capabilities": ["read"]}, {"agent_id": "b", "capabilities": ["read", "read x"]}]
	_widened(asked) == [{"hop": 2, "agent_id": "b", "capability": "(a name that is not an identifier)"}]
}

test_a_non_identifier_widens_even_where_the_hop_before_lists_the_placeholder if {
	chain := [
		{"agent_id": "a", "capabilities": ["(a name that is not an identifier)", "admin"]},
		{"agent_id": "b", "capabilities": ["admin", "x y"]},
	]
	_widened(chain) == [{"hop": 2, "agent_id": "b", "capability": "(a name that is not an identifier)"}]
}

test_a_hop_after_one_that_lists_no_capabilities_widens_all_it_holds if {
	chain := [{"agent_id": "a"}, {"agent_id": "b", "capabilities": ["admin"]}]
	_widened(chain) == [{"hop": 2, "agent_id": "b", "capability": "admin"}]
}

test_a_widening_capability_listed_twice_is_listed_twice if {
	chain := [
		{"agent_id": "a", "capabilities": ["read"]},
		{"agent_id": "b", "capabilities": ["write", "read:x", "write", "admin", "admin", "write"]},
	]
	_widened(chain) == [
		{"hop": 2, "agent_id": "b", "capability": "admin"},
		{"hop": 2, "agent_id": "b", "capability": "admin"},
		{"hop": 2, "agent_id": "b", "capability": "write"},
		{"hop": 2, "agent_id": "b", "capability": "write"},
		{"hop": 2, "agent_id": "b", "capability": "write"},
	]
}

# The characters a pattern reads as operators ('.', '+', '*') cover only themselves: a.b does
# not cover axb, a+b not aab, a*b not a*bb. A hop after an empty one widens all it holds; an
# empty capability (refused by the input contract) is checked one by one and widens.
test_operator_characters_in_capabilities_are_literal if {
	chain := [
		{"agent_id": "a", "capabilities": ["a.b", "a+b", "a*b", "x"]},
		{"agent_id": "b", "capabilities": ["a.b:x", "axb", "a+b", "a*b:c", "a*bb", "a.b", "a.b", "aab"]},
		{"agent_id": "c", "capabilities": []},
		{"agent_id": "d", "capabilities": ["q"]},
		{"agent_id": "e", "capabilities": ["", "q:r"]},
	]
	_widened(chain) == [
		{"hop": 2, "agent_id": "b", "capability": "a*bb"},
		{"hop": 2, "agent_id": "b", "capability": "aab"},
		{"hop": 2, "agent_id": "b", "capability": "axb"},
		{"hop": 4, "agent_id": "d", "capability": "q"},
		{"hop": 5, "agent_id": "e", "capability": ""},
	]
}

# Hops a regex and a per-capability check read alike: every hop of a long chain, each against
# the one before it, whichever body decides it.
test_each_hop_is_checked_against_the_one_before if {
	chain := [
		{"agent_id": "a", "capabilities": ["read", "write"]},
		{"agent_id": "b", "capabilities": ["read:x", "write"]},
		{"agent_id": "c", "capabilities": ["read:x:y", "write", "read"]},
		{"agent_id": "d", "capabilities": ["read"]},
	]
	_widened(chain) == [{"hop": 3, "agent_id": "c", "capability": "read"}]
}
