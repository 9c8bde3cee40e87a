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
import data.kcp.lib.names

_chain := input.action.delegation_chain

_max_depth := facts.profile.delegation.max_depth

# A hop's capabilities; a hop that lists none holds none.
_capabilities(i) := object.get(_chain[i], "capabilities", [])

# The capabilities of hop i that no capability of hop i-1 covers, sorted (one listed twice is
# listed twice: dropping repeats costs regopy more than the whole check). c is
# covered by p when c == p or c starts with p + ":", that is when c + ":" starts with p + ":":
# one native prefix match per capability over an array. No object, set or object lookup: in
# regopy each of those is superlinear in its size (docs/engine-findings.md items 28 and 33), and
# a chain may hold 8 hops of 32 capabilities. The comprehension reads locals only: on regopy a
# comprehension inside a function ignores an argument it uses as an index (item 30).
_widened_at(i) := sort(widening) if {
	capabilities := _capabilities(i)
	names.identifiers(capabilities)
	covering := names.with_suffix(_capabilities(i - 1), ":")
	widening := [c | some c in capabilities; not strings.any_prefix_match(concat("", [c, ":"]), covering)]
}

# A hop holding a capability that is not an identifier widens, whatever the hop before lists:
# the input contract refuses such an action, and a policy evaluated without it fails closed.
_widened_at(i) := [names.not_an_identifier] if not names.identifiers(_capabilities(i))

# METADATA
# title: Hops that widen capabilities
# description: |
#   Each capability a hop holds that the previous hop's capabilities do not cover: covered
#   means equal, or narrower by a ":" suffix (read:case:summary is within read:case,
#   read:casefile is not). In hop order, then by capability; hop 1 is the first agent.
widened := [hop_widened |
	some i
	_chain[i]
	i > 0
	some capability in _widened_at(i)
	hop_widened := {"hop": i + 1, "agent_id": _chain[i].agent_id, "capability": capability}
]

# METADATA
# title: Findings
# custom:
#   requires: [input.action.knowledge.unit]
#   absent: "no delegation_chain: no delegation"
findings contains finding if {
	is_number(_max_depth)
	count(_chain) > _max_depth
	text1 := concat("", [
		"delegation chain of depth ",
		format_int(count(_chain), 10),
		" exceeds max_depth ",
		format_int(_max_depth, 10),
	])
	finding := {
		"code": "delegation_too_deep",
		"rule": "kcp.delegation.max_depth",
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
		"state": "DENY",
		"controls": [],
		"message": "a delegation hop widens the capabilities it was given",
		"details": {"hops": widened},
	}
}
