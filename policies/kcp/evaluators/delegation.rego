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
# listed twice: dropping repeats costs regopy more than the whole check). c is covered by p
# when c == p or c starts with p + ":", that is when c + ":" starts with p + ":". No object,
# set or object lookup: in regopy each of those is superlinear in its size
# (docs/engine-findings.md items 28 and 33), and a chain may hold 8 hops of 32 capabilities.
#
# First body, no per-capability step (regopy pays ~20 us for each element a comprehension
# visits with a builtin call): the hop's capabilities joined as ",c1:,c2:,", and one
# regex.replace deletes every item that starts with a previous capability + ":" (the previous
# hop's identifiers as literal alternatives; '.', '+' and '*' are the only characters of an
# identifier that a pattern reads as operators). What is left, split, is the widening. The
# pattern's one repetition ([^,]*) runs within one item: the joined string is bounded so that
# it cannot reach the length at which a repeated class crashes regopy (item 31). An empty
# capability (",:," in the joined string), an empty previous hop (an empty alternation would
# cover everything) or a longer string take the second body, the per-capability check.
_widened_at(i) := sort(_items(left)) if {
	capabilities := _capabilities(i)
	names.identifiers(capabilities)
	previous := _capabilities(i - 1)
	count(previous) > 0
	names.identifiers(previous)
	joined := concat("", [",", concat(":,", capabilities), ":,"])
	count(joined) < 16384
	count(concat(",", previous)) < 16384
	not contains(joined, ",:,")
	covered := concat("", [",(?:", _alternatives(previous), "):[^,]*"])
	left := regex.replace(joined, covered, "")
} else := sort(widening) if {
	capabilities := _capabilities(i)
	names.identifiers(capabilities)
	covering := names.with_suffix(_capabilities(i - 1), ":")
	widening := [c | some c in capabilities; not strings.any_prefix_match(concat("", [c, ":"]), covering)]
}

# A hop holding a capability that is not an identifier widens, whatever the hop before lists:
# the input contract refuses such an action, and a policy evaluated without it fails closed.
_widened_at(i) := [names.not_an_identifier] if not names.identifiers(_capabilities(i))

# Identifiers as the alternatives of a pattern, each matched literally.
_alternatives(identifiers) := replace(replace(replace(concat("|", identifiers), ".", `\.`), "+", `\+`), "*", `\*`)

# The capabilities left in ",c1:,c2:," by _widened_at, without their ":" ("," when none is).
_items(left) := [] if left == "," else := split(trim(replace(left, ":,", ","), ","), ",")

# METADATA
# title: Hops that widen capabilities, one entry a hop
# description: |
#   Each hop holding a capability that the previous hop's capabilities do not cover (covered
#   means equal, or narrower by a ":" suffix: read:case:summary is within read:case,
#   read:casefile is not), with those capabilities sorted, in hop order; hop 1 is the first
#   agent. What the finding carries: one object a hop, not one a capability (regopy pays for
#   every object a finding carries through the gate, docs/performance.md).
widening_hops := _widening_hops if is_array(_chain) else := _widening_any

# The hops 1..n-1 counted, not iterated, each tested and checked in the order of
# _widening_any, so both read the same hops.
_widening_hops := [] if count(_chain) < 2 else := [hop_widened |
	some i in numbers.range(1, count(_chain) - 1)
	_chain[i]
	widening := _widened_at(i)
	count(widening) > 0
	hop_widened := {"hop": i + 1, "agent_id": _chain[i].agent_id, "capabilities": widening}
]

# A chain that is not an array (refused by the input contract): its keys as the hops.
_widening_any := [hop_widened |
	some i
	_chain[i]
	i > 0
	widening := _widened_at(i)
	count(widening) > 0
	hop_widened := {"hop": i + 1, "agent_id": _chain[i].agent_id, "capabilities": widening}
]

# METADATA
# title: Capabilities that widen, one entry each
# description: |
#   widening_hops flattened: {hop, agent_id, capability} per widened capability, in hop order,
#   then by capability (for tools and tests; the finding carries widening_hops).
widened := [hop_widened |
	some hop in widening_hops
	some capability in hop.capabilities
	hop_widened := {"hop": hop.hop, "agent_id": hop.agent_id, "capability": capability}
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
	count(widening_hops) > 0
	finding := {
		"code": "capability_widened",
		"rule": "kcp.delegation.require_capability_attenuation",
		"state": "DENY",
		"controls": [],
		"message": "a delegation hop widens the capabilities it was given",
		"details": {"hops": widening_hops},
	}
}

# METADATA
# title: Applies (the decision plan, compile time)
# description: |
#   Whether this evaluator can find anything (or owe an obligation) for a unit of `profile` and an
#   action of type `task`, from declarations alone. `kcp-opa compile` evaluates it over every
#   profile and every action type the matrix names into the bundle's decision plan; a decision
#   reaches this evaluator only when its plan row names it (kcp.gate.planned). It may
#   over-approximate (a needless visit costs time) but never miss (a miss skips a finding). It
#   reads only its arguments and data.kcp_data, never input. docs/extending.md.
applies(profile, _) if is_number(profile.delegation.max_depth)

applies(profile, _) if profile.delegation.require_capability_attenuation == true
