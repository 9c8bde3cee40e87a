# METADATA
# title: Facts about the action
# description: |
#   What every evaluator reads about the action under decision, computed once per query as
#   rules over input (rules are cheaper than functions in regopy; docs/engine-findings.md).
package kcp.lib.facts

import rego.v1

import data.kcp.lib.index

# METADATA
# title: The action intent
action := input.action

# METADATA
# title: Knowledge-bound
# description: True when the action names a KCP unit it touches.
knowledge_bound if input.action.knowledge.unit

_project := input.action.knowledge.project

_unit_id := input.action.knowledge.unit

_hash := crypto.sha256(concat("/", [_project, _unit_id]))

# METADATA
# title: The effective unit the action touches
# description: |
#   Undefined when the action names no unit or an unknown one. index.unit() written as
#   rules over input: regopy evaluates this in about half the time (docs/performance.md),
#   and kcp.lib.facts_test checks the two agree. Every body spells out the static path
#   data.kcp_data.units...: an alias rule (`u := data.kcp_data.units`) makes OPA copy the
#   whole index on each query (21 ms at 1,000 units).
unit := data.kcp_data.units.slots[_project][_unit_id] if data.kcp_data.units.depth == 0

unit := data.kcp_data.units.slots[index.digit(_hash, 0)][_project][_unit_id] if data.kcp_data.units.depth == 1

unit := data.kcp_data.units.slots[index.digit(_hash, 0)][index.digit(_hash, 1)][_project][_unit_id] if data.kcp_data.units.depth == 2

unit := entry if {
	data.kcp_data.units.depth == 3
	entry := data.kcp_data.units.slots[index.digit(_hash, 0)][index.digit(_hash, 1)][index.digit(_hash, 2)][_project][_unit_id]
}

unit := entry if {
	data.kcp_data.units.depth == 4
	entry := data.kcp_data.units.slots[index.digit(_hash, 0)][index.digit(_hash, 1)][index.digit(_hash, 2)][index.digit(_hash, 3)][_project][_unit_id]
}

# METADATA
# title: Known unit
# description: True when the action names a unit the deployment declares.
unit_known if unit

# METADATA
# title: Restriction declared
# description: True when the effective unit declares restriction `name`.
restricted(name) if name in unit.compliance.restrictions
