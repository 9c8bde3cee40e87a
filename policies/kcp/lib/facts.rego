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
default knowledge_bound := false

knowledge_bound if input.action.knowledge.unit

# METADATA
# title: Money-moving task types declared
# description: |
#   True when the matrix lists the task types that move money (parameters.money_moving_task_types):
#   then only those are value transfers, and an amount on any other is denied (kcp.evaluators.financial).
default money_moving_declared := false

money_moving_declared if is_array(data.kcp_data.matrix.parameters.money_moving_task_types)

# METADATA
# title: Money-moving action types
# description: The matrix's money_moving_task_types when it lists them, else these built-in ones.
money_moving := {"payment", "cross_border_payment", "withdrawal", "refund", "transfer", "payout", "lending"} if {
	not money_moving_declared
} else := data.kcp_data.matrix.parameters.money_moving_task_types

# METADATA
# title: Value transfer
# description: |
#   A money-moving action type; where the matrix does not list them, also any positive amount
#   (the KYA controls, the budgets and the context check read it).
default value_transfer := false

value_transfer if input.action.action_type in money_moving

value_transfer if {
	not money_moving_declared
	input.action.amount.value_minor > 0
}

_project := input.action.knowledge.project

_unit_id := input.action.knowledge.unit

_hash := crypto.sha256(concat("/", [_project, _unit_id]))

# METADATA
# title: The index entry of the unit the action touches
# description: |
#   null when the action names no unit or an unknown one: never undefined, because regopy
#   re-evaluates a rule whose value is undefined at every reference (~50 us each here), while a
#   defined value is computed once per query (docs/engine-findings.md). index.unit() written as
#   rules over input: regopy evaluates this in about half the time (docs/performance.md),
#   and kcp.lib.facts_test checks the two agree. Every body spells out the static path
#   data.kcp_data.units...: an alias rule (`u := data.kcp_data.units`) makes OPA copy the
#   whole index on each query (21 ms at 1,000 units).
unit := entry if {
	# mutate: equivalent another depth's index has no entry here (a string never indexes a digit array, a digit no name)
	data.kcp_data.units.depth == 0
	entry := data.kcp_data.units.slots[_project][_unit_id]
} else := entry if {
	# mutate: equivalent another depth's index has no entry here (a string never indexes a digit array, a digit no name)
	data.kcp_data.units.depth == 1
	entry := data.kcp_data.units.slots[index.digit(_hash, 0)][_project][_unit_id]
} else := entry if {
	# mutate: equivalent another depth's index has no entry here (a string never indexes a digit array, a digit no name)
	data.kcp_data.units.depth == 2
	entry := data.kcp_data.units.slots[index.digit(_hash, 0)][index.digit(_hash, 1)][_project][_unit_id]
} else := entry if {
	# mutate: equivalent another depth's index has no entry here (a string never indexes a digit array, a digit no name)
	data.kcp_data.units.depth == 3
	d0 := index.digit(_hash, 0)
	entry := data.kcp_data.units.slots[d0][index.digit(_hash, 1)][index.digit(_hash, 2)][_project][_unit_id]
} else := entry if {
	# mutate: equivalent another depth's index has no entry here (a string never indexes a digit array, a digit no name)
	data.kcp_data.units.depth == 4
	d0 := index.digit(_hash, 0)
	d1 := index.digit(_hash, 1)
	d2 := index.digit(_hash, 2)
	entry := data.kcp_data.units.slots[d0][d1][d2][index.digit(_hash, 3)][_project][_unit_id]
} else := null

# METADATA
# title: The unit's policy profile
# description: |
#   Sensitivity, compliance, delegation, trust and freshness of the unit the action touches.
#   Units share them through inheritance, so the bundle stores each distinct profile once and
#   the unit's entry names its position (docs/data-layout.md); the entry itself (`unit`) keeps
#   only what differs unit by unit (validated, validated_epoch_day).
profile := entry if {
	entry := data.kcp_data.profiles[unit.profile]
} else := null

# METADATA
# title: Known unit
# description: |
#   True when the action names a unit the deployment declares and its profile resolves: an
#   entry whose profile is missing (a hand-edited bundle) is no unit to decide on, and the
#   unit evaluator denies it as unknown rather than letting every rule read nothing.
default unit_known := false

unit_known if is_object(profile)

# METADATA
# title: Restriction declared
# description: True when the effective unit declares restriction `name`.
restricted(name) if name in profile.compliance.restrictions
