# METADATA
# title: Delegation chain
# description: |
#   The chain of agents acting for the subject (hop 1 = first agent, depth 1) may not be
#   longer than the unit's effective max_depth, and under require_capability_attenuation
#   each hop's capabilities must lie within the previous hop's: a scope is within its
#   prefix (read:case:summary is within read:case).
# custom:
#   evaluator_id: delegation_check
#   evaluator_version: "1.0.0"
package kcp.evaluators.delegation

import rego.v1

import data.kcp.lib.facts

evaluator := {"id": "delegation_check", "version": "1.0.0"}

_chain := input.action.delegation_chain

_max_depth := facts.profile.delegation.max_depth

# METADATA
# title: Capability covered
# description: True when `capability` equals `granted` or narrows it with a ":" suffix.
covered(capability, granted) if capability == granted

covered(capability, granted) if startswith(capability, concat("", [granted, ":"]))

_within(capability, parent_capabilities) if {
	some granted in parent_capabilities
	covered(capability, granted)
}

# METADATA
# title: Hops that widen capabilities
widened contains hop_widened if {
	some i, hop in _chain
	i > 0
	some capability in hop.capabilities
	not _within(capability, _chain[i - 1].capabilities)
	hop_widened := {"hop": i + 1, "agent_id": hop.agent_id, "capability": capability}
}

# METADATA
# title: Findings
# custom:
#   requires: [input.action.knowledge.unit]
#   absent: "no delegation_chain: no delegation"
findings contains finding if {
	is_number(_max_depth)
	count(_chain) > _max_depth
	text1 := concat("", ["delegation chain of depth ", format_int(count(_chain), 10), " exceeds max_depth ", format_int(_max_depth, 10)])
	finding := {
		"code": "delegation_too_deep",
		"rule": "kcp.delegation.max_depth",
		"evaluator_id": "delegation_check",
		"evaluator_version": "1.0.0",
		"state": "DENY",
		"controls": [],
		"message": text1,
		"details": {"depth": count(_chain), "max_depth": _max_depth},
	}
}

# METADATA
# custom:
#   requires: [input.action.knowledge.unit]
#   absent: "no delegation_chain: no delegation"
findings contains finding if {
	facts.profile.delegation.require_capability_attenuation == true
	count(widened) > 0
	finding := {
		"code": "capability_widened",
		"rule": "kcp.delegation.require_capability_attenuation",
		"evaluator_id": "delegation_check",
		"evaluator_version": "1.0.0",
		"state": "DENY",
		"controls": [],
		"message": "a delegation hop widens the capabilities it was given",
		"details": {"hops": sort([w | some w in widened])},
	}
}
