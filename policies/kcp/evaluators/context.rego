# METADATA
# title: Missing context and action freshness
# description: |
#   Principle 3 of the gate contract: missing context a rule needs is never an allow. Every
#   evaluator's findings rules state the facts they need (METADATA custom.requires); this
#   evaluator checks the ones whose absence would make a rule silently not fire, and answers
#   ESCALATE `context_missing` naming each absent path. An action is knowledge-bound when it
#   names a unit or when the deployment binds its task type to knowledge (matrix
#   parameters.context.knowledge_bound_task_types, default "all"): such an action needs its
#   knowledge block, the resource tenant, the budget state and the attested evidence status, and
#   the environment and actor role its unit's visibility conditions match on (KCP §4.16). The
#   gate and attested facts a rule reads are needed from input.context.facts (the context
#   stage), never the action: a statement the gate cannot confirm is context_missing, and a
#   statement that differs from the gate's value is a context_conflict (recorded, ALLOW: the
#   rules themselves apply the stricter of the two, kcp.lib.trusted). A value transfer needs the
#   resource tenant (target.tenant_id) unless its target type is one the deployment declares
#   outside every tenant (parameters.context.external_target_types). Freshness: an action created
#   more than max_action_age_seconds before the decision is `action_stale`, more than
#   max_future_skew_seconds after it `clock_skew` (both ESCALATE). Times are integers in input
#   (Python builds them; the engines parse RFC 3339 differently, docs/engine-findings.md).
# custom:
#   evaluator_id: context_check
#   evaluator_version: "1.0.0"
package kcp.evaluators.context

import rego.v1

import data.kcp.lib.facts
import data.kcp.lib.trusted

_settings := object.get(data.kcp_data.matrix, ["parameters", "context"], {})

_bound_types := object.get(_settings, "knowledge_bound_task_types", "all")

_max_age := object.get(_settings, "max_action_age_seconds", 86400)

_max_skew := object.get(_settings, "max_future_skew_seconds", 900)

# METADATA
# title: Knowledge-bound
# description: The action names a unit, or the deployment binds its task type to knowledge.
default bound := false

bound if facts.knowledge_bound

bound if _bound_types == "all"

bound if {
	is_array(_bound_types)
	some task in _bound_types
	task == input.action.action_type
}

# METADATA
# title: Facts every decision needs
# description: The decision time (seconds and day) and the action's creation time.
always := {
	"input.context.decision_epoch_seconds",
	"input.context.decision_epoch_day",
	"input.context.action_created_epoch_seconds",
}

# METADATA
# title: Facts a knowledge-bound action needs
# description: Its unit (every knowledge rule), the resource tenant (tenant_boundary), the budget state and the evidence
#    status.
when_bound := {
	"input.action.knowledge.project",
	"input.action.knowledge.unit",
	"input.action.target.tenant_id",
	"input.action.runtime.budget_state",
	"input.context.facts.evidence_status",
}

# METADATA
# title: Gate and attested facts the action's rules need
# description: |
#   The deployment region under a data_residency, the model's hosting under no-external-llm, the
#   actor role of a send, the agent's scope for a value transfer, and the beneficiary and
#   screening status of a value transfer to a beneficiary.
when_facts contains "input.context.facts.deployment_region" if is_array(_compliance.data_residency)

when_facts contains "input.context.facts.model_hosting" if "no-external-llm" in _restrictions

when_facts contains "input.context.facts.actor_role" if input.action.action_type == "send"

when_facts contains "input.context.facts.agent_scope" if facts.value_transfer

when_facts contains path if {
	facts.value_transfer
	input.action.target.type == "beneficiary"
	some path in {
		"input.context.facts.new_beneficiary",
		"input.context.facts.modified_beneficiary",
		"input.context.facts.screening_uncertain",
	}
}

# The profile is read once, with the visibility needs (regopy plans every reference to it anew
# under mocked data: docs/engine-findings.md item 27).
_compliance := c if {
	c := _profile.compliance
	# mutate: equivalent only .data_residency and .restrictions of it are read: undefined on a non-object, as with {}
	is_object(c)
} else := {}

_profile := p if {
	p := facts.profile
	# mutate: equivalent only .compliance and .effective_visibility of it are read: undefined on a non-object, as with {}
	is_object(p)
} else := {}

_restrictions := r if {
	r := _compliance.restrictions
	is_array(r)
} else := []

# METADATA
# title: Facts a value transfer needs
# description: |
#   The resource tenant: without target.tenant_id a transfer to another tenant's account passes
#   tenant_boundary unseen and is routed for approval like an in-tenant payment.
when_transfer := {"input.action.target.tenant_id"} if _tenant_held_transfer

when_transfer := set() if not _tenant_held_transfer

# A deployment names the target types that are outside every tenant (an external payee such as
# a supplier's `beneficiary`: matrix parameters.context.external_target_types); every other
# value transfer states the tenant that holds its target.
_external_targets := object.get(_settings, "external_target_types", [])

default _tenant_held_transfer := false

_tenant_held_transfer if {
	facts.value_transfer
	not _external_target
}

_external_target if {
	some kind in _external_targets
	kind == input.action.target.type
}

# METADATA
# title: Facts the unit's visibility conditions need
# description: A condition of the unit's visibility (KCP §4.16) on environment or agent_role needs the action to state
#    it.
when_visible contains path if {
	some key in _visibility_needs
	path := _visibility_paths[key]
}

_visibility_paths := {"environment": "input.context.facts.environment", "agent_role": "input.context.facts.actor_role"}

# One reference to the profile (regopy plans every reference anew; docs/engine-findings.md item 27).
_visibility_needs := needs if {
	needs := _profile.effective_visibility.needs
	is_array(needs)
} else := []

# METADATA
# title: Every path this evaluator can require
required_paths := (always | when_bound) | {
	"input.context.facts.environment",
	"input.context.facts.actor_role",
	"input.context.facts.deployment_region",
	"input.context.facts.model_hosting",
	"input.context.facts.agent_scope",
	"input.context.facts.new_beneficiary",
	"input.context.facts.modified_beneficiary",
	"input.context.facts.screening_uncertain",
}

# METADATA
# title: Facts this action needs
required := (((always | when_bound) | when_visible) | when_facts) | when_transfer if bound

required := (always | when_facts) | when_transfer if not bound

# Present facts, collected positively and subtracted as a set (`not is_string(undefined)`
# differs between the engines, docs/engine-findings.md item 11).
_present contains "input.context.decision_epoch_seconds" if is_number(input.context.decision_epoch_seconds)

_present contains "input.context.decision_epoch_day" if is_number(input.context.decision_epoch_day)

_present contains "input.context.action_created_epoch_seconds" if is_number(input.context.action_created_epoch_seconds)

_present contains "input.action.knowledge.project" if is_string(input.action.knowledge.project)

_present contains "input.action.knowledge.unit" if is_string(input.action.knowledge.unit)

_present contains "input.action.target.tenant_id" if is_string(input.action.target.tenant_id)

_present contains "input.action.runtime.budget_state" if is_string(input.action.runtime.budget_state)

# A gate or attested fact is present when the gate established it: one lookup per established
# fact, where a rule per fact cost regopy a rule body each on every decision.
_present contains path if {
	some name in trusted.established
	path := _fact_paths[name]
}

_fact_paths := {
	"environment": "input.context.facts.environment",
	"actor_role": "input.context.facts.actor_role",
	"deployment_region": "input.context.facts.deployment_region",
	"model_hosting": "input.context.facts.model_hosting",
	"agent_scope": "input.context.facts.agent_scope",
	"evidence_status": "input.context.facts.evidence_status",
	"new_beneficiary": "input.context.facts.new_beneficiary",
	"modified_beneficiary": "input.context.facts.modified_beneficiary",
	"screening_uncertain": "input.context.facts.screening_uncertain",
}

# METADATA
# title: Missing facts
missing := required - _present

_now := input.context.decision_epoch_seconds

_created := input.context.action_created_epoch_seconds

# METADATA
# title: Findings
# description: ESCALATE context_missing, one per absent fact, naming its path.
# custom:
#   requires: []
findings contains finding if {
	some path in missing
	finding := {
		"code": "context_missing",
		"rule": "kcp.context.required",
		"state": "ESCALATE",
		"controls": [],
		"message": concat("", ["a rule needs ", path, " and the input lacks it; nothing is allowed without it"]),
		"details": {"fields": [path]},
	}
}

# METADATA
# title: Action stale
# description: ESCALATE action_stale when the action was created too long before the decision.
# custom:
#   requires: [input.context.decision_epoch_seconds, input.context.action_created_epoch_seconds]
findings contains finding if {
	is_number(_now)
	is_number(_created)
	_now - _created > _max_age
	text1 := concat("", [
		"the action was created ",
		format_int(_now - _created, 10),
		" s before the decision; the limit is ",
		format_int(_max_age, 10),
		" s",
	])
	finding := {
		"code": "action_stale",
		"rule": "kcp.context.freshness",
		"state": "ESCALATE",
		"controls": [],
		"message": text1,
		"details": {"age_seconds": _now - _created, "max_action_age_seconds": _max_age},
	}
}

# METADATA
# title: Clock skew
# description: ESCALATE clock_skew when the action claims to be created after the decision, beyond the allowed skew.
# custom:
#   requires: [input.context.decision_epoch_seconds, input.context.action_created_epoch_seconds]
findings contains finding if {
	is_number(_now)
	is_number(_created)
	_created - _now > _max_skew
	text1 := concat("", [
		"the action is dated ",
		format_int(_created - _now, 10),
		" s after the decision; the allowed skew is ",
		format_int(_max_skew, 10),
		" s",
	])
	finding := {
		"code": "clock_skew",
		"rule": "kcp.context.freshness",
		"state": "ESCALATE",
		"controls": [],
		"message": text1,
		"details": {"ahead_seconds": _created - _now, "max_future_skew_seconds": _max_skew},
	}
}

# METADATA
# title: Context conflict
# description: |
#   A stated gate or attested fact that differs from the gate's value: recorded (the message names
#   the fact and both values), deciding nothing itself: the rules already apply the stricter of
#   the two (kcp.lib.trusted).
# custom:
#   requires: []
findings contains finding if {
	some conflict in trusted.conflicts
	text1 := concat("", [
		"the action states ",
		conflict.fact,
		" ",
		_text(conflict.stated),
		"; the gate's value is ",
		_text(conflict.gate),
		" (",
		_source(conflict.fact),
		"): the gate's applies, or the stated one where it is stricter",
	])
	finding := {
		"code": "context_conflict",
		"rule": "kcp.context.trusted",
		"state": "ALLOW",
		"controls": [],
		"message": text1,
		"details": {
			"fields": [concat(".", array.concat(["input", "action"], trusted.stated_paths[conflict.fact]))],
			"fact": conflict.fact,
			"gate": conflict.gate,
			"stated": conflict.stated,
		},
	}
}

# Values are identifiers, booleans or lists of identifiers (the input contract): no sprintf.
_text(v) := v if is_string(v)

_text(v) := "true" if v == true

_text(v) := "false" if v == false

_text(v) := concat("", ["[", concat(", ", sort([x | x := v[_]; is_string(x)])), "]"]) if is_array(v)

_text(v) := "(a value of another type)" if {
	not is_string(v)
	not is_boolean(v)
	not is_array(v)
}

_source(name) := s if {
	s := input.context.facts[name].source
	is_string(s)
} else := "source not named"
