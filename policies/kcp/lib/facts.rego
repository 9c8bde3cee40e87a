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

# METADATA
# title: The effective unit the action touches
# description: Undefined when the action names no unit or an unknown one.
unit := index.unit(input.action.knowledge.project, input.action.knowledge.unit)

# METADATA
# title: Restriction declared
# description: True when the effective unit declares restriction `name`.
restricted(name) if name in unit.compliance.restrictions
