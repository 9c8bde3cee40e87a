# METADATA
# title: Effective visibility
# description: |
#   KCP §4.16: a unit's visibility block (the unit's replaces the root's) gives a default
#   sensitivity and ordered conditions on the gate's environment and the actor's role
#   (input.context.facts.environment, .actor_role: gate facts, never the action's statement, which
#   kcp.lib.trusted only compares; the two values are not ordered, so the gate's applies); the first
#   condition whose every `when` key lists the action's value wins, and its sensitivity and
#   requires_auth apply. A stated environment or role that no condition lists falls to the default
#   (the spec's MUST). A condition key the action does not state is missing context
#   (kcp.evaluators.context answers context_missing) and meanwhile the strictest branch applies.
#   Without a block the flat sensitivity applies. kcp_opa/declare/governance.py resolves
#   first-match-wins at compile time into the profile's effective_visibility.cells (environment ->
#   role -> result; "" = a value no condition lists), so a decision is two object lookups in one
#   rule that reads the profile once: regopy's planning time grows with every reference to the
#   profile (docs/engine-findings.md item 27).
package kcp.lib.visibility

import rego.v1

import data.kcp.lib.facts
import data.kcp.lib.trusted

_env := trusted.gate.environment if is_string(trusted.gate.environment) else := ""

_role := trusted.gate.actor_role if is_string(trusted.gate.actor_role) else := ""

_given contains "environment" if is_string(trusted.gate.environment)

_given contains "agent_role" if is_string(trusted.gate.actor_role)

# A profile without effective_visibility (a hand-edited bundle) gets "undeclared", which no
# matrix cell covers: a DENY, never the flat level read past a visibility block.
_fallback := {"needs": [], "cells": {"": {"": _undeclared}}, "incomplete": _undeclared}

_undeclared := {"sensitivity": "undeclared", "requires_auth": false, "condition": null, "source": "not in the bundle"}

# METADATA
# title: Effective visibility of the decision
# description: |
#   {sensitivity, requires_auth, condition, source}: condition is the position of the first
#   matching condition (null for the default, the flat sensitivity or missing context); null
#   when the action names no known unit. One body, one reference to the profile.
view := result if {
	p := facts.profile
	is_object(p)
	v := object.get(p, "effective_visibility", _fallback)
	row := object.get(v.cells, _env, v.cells[""])
	hit := object.get(row, _role, row[""])
	gap := count({k | some k in v.needs; not _given[k]})
	result := [hit, v.incomplete][min([gap, 1])] # kcp-opa: ordered alike (a count against 1)
} else := null

# METADATA
# title: Effective sensitivity
# description: The level the matrix's sensitivity cell is looked up with ("undeclared" when nothing
#   declares one); undefined without a known unit.
sensitivity := view.sensitivity

# METADATA
# title: Requires authentication
# description: The matched condition's requires_auth; while context is missing, true if any branch asks for it.
default requires_auth := false

requires_auth if view.requires_auth == true
