# METADATA
# title: KCP authority
# description: |
#   KCP §3.8/§4.17: what an agent may do with a unit. The delegation matrix says which KCP
#   action each task type performs (kcp_action; a task type named like a standard action maps
#   to it); the bundle carries the unit's effective authority (the unit's block replaces the
#   root's whole; absent = the safe defaults read/summarize initiative, modify/share_externally/
#   execute denied). denied = DENY authority_denied; a custom action the block does not declare
#   is denied too; requires_approval = HUMAN_APPROVAL with the unit's human_in_the_loop
#   mechanism as the control's detail; a task type with no KCP action on a unit that declares
#   authority = ESCALATE authority_unmapped (context missing).
# custom:
#   evaluator_id: authority_check
#   evaluator_version: "1.0.0"
package kcp.evaluators.authority

import rego.v1

import data.kcp.lib.facts

_safe_defaults := {
	"read": "initiative",
	"summarize": "initiative",
	"modify": "denied",
	"share_externally": "denied",
	"execute": "denied",
}

# METADATA
# title: KCP action of the task type
# description: The matrix's kcp_action for the action's task type; null when the matrix maps none.
kcp_action := mapped if {
	mapped := data.kcp_data.matrix.kcp_actions[input.action.action_type]
	is_string(mapped)
} else := null

# A profile without an authority object (a hand-edited bundle) gets the spec's safe defaults.
_actions := facts.profile.authority.actions if {
	is_object(facts.profile.authority.actions)
} else := _safe_defaults

default _declared := false

_declared if facts.profile.authority.declared == true

# METADATA
# title: Effective authority value
# description: initiative, requires_approval or denied for the mapped action; null when the unit declares none for it.
level := value if {
	is_string(kcp_action)
	value := _actions[kcp_action]
} else := null

_mechanism := m if {
	m := facts.profile.delegation.human_in_the_loop.approval_mechanism
	is_string(m)
} else := "not declared"

_action_label := kcp_action if is_string(kcp_action) else := "(none)"

# METADATA
# title: Findings
# custom:
#   requires: [input.action.knowledge.unit, input.action.action_type]
findings contains finding if {
	facts.unit_known
	level == "denied"
	finding := {
		"code": "authority_denied",
		"rule": "kcp.authority.denied",
		"state": "DENY",
		"controls": [],
		"message": concat("", ["the unit's authority denies ", _action_label, " (KCP §4.17)"]),
		"details": {"kcp_action": _action_label, "authority": "denied"},
	}
}

# METADATA
# custom:
#   requires: [input.action.knowledge.unit, input.action.action_type]
findings contains finding if {
	facts.unit_known
	is_string(kcp_action)
	level == null
	finding := {
		"code": "authority_denied",
		"rule": "kcp.authority.custom",
		"state": "DENY",
		"controls": [],
		"message": concat("", [
			"custom action ",
			_action_label,
			" is not declared in the unit's authority: unknown actions are denied (KCP §4.17)",
		]),
		"details": {"kcp_action": _action_label, "authority": "undeclared"},
	}
}

# METADATA
# custom:
#   requires: [input.action.knowledge.unit, input.action.action_type]
findings contains finding if {
	facts.unit_known
	level == "requires_approval"
	finding := {
		"code": "authority_requires_approval",
		"rule": "kcp.authority.requires_approval",
		"state": "HUMAN_APPROVAL",
		"controls": ["independent_human_approval"],
		"message": concat("", [
			"the unit's authority requires approval for ",
			_action_label,
			" (approval mechanism: ",
			_mechanism,
			")",
		]),
		"details": {"kcp_action": _action_label, "authority": "requires_approval", "approval_mechanism": _mechanism},
	}
}

# METADATA
# custom:
#   requires: [input.action.knowledge.unit, input.action.action_type]
findings contains finding if {
	facts.unit_known
	_declared
	kcp_action == null
	finding := {
		"code": "authority_unmapped",
		"rule": "kcp.authority.unmapped",
		"state": "ESCALATE",
		"controls": [],
		"message": concat("", [
			"the unit declares authority but the delegation matrix does not say which KCP action this task type performs ",
			"(kcp_action)",
		]),
		"details": {"fields": ["data.kcp_data.matrix.kcp_actions"]},
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
applies(profile, task) if {
	is_object(profile)
	mapped := _mapped(task)
	is_string(mapped)
	not _initiative(profile, mapped)
}

applies(profile, task) if {
	_mapped(task) == null
	profile.authority.declared == true
}

_mapped(task) := mapped if {
	mapped := data.kcp_data.matrix.kcp_actions[task]
	is_string(mapped)
} else := null

_initiative(profile, mapped) if _actions_of(profile)[mapped] == "initiative"

_actions_of(profile) := profile.authority.actions if {
	is_object(profile.authority.actions)
} else := _safe_defaults
