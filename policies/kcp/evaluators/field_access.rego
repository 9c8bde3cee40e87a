# METADATA
# title: Field access (data minimisation)
# description: |
#   An agent may read only the fields a unit declares. Fields read outside `declared_fields`
#   deny the action and are listed as violations; a unit that declares fields but an action
#   that does not say what it reads is denied too (missing context never allows). For an action
#   whose type the unit's `declared_fields_by_task_type` lists, that list replaces
#   `declared_fields` (validation keeps it within `declared_fields`).
# custom:
#   evaluator_id: field_access_check
#   evaluator_version: "1.0.0"
package kcp.evaluators.field_access

import rego.v1

import data.kcp.lib.facts
import data.kcp.lib.names

# The action type's own list when the unit declares one (one lookup), else declared_fields.
_declared := listed if {
	listed := facts.profile.compliance.declared_fields_by_task_type[input.action.action_type]
} else := facts.profile.compliance.declared_fields

# Which declaration the fields were read against, for the finding's message and details.
_declared_in := concat(".", ["declared_fields_by_task_type", input.action.action_type]) if {
	facts.profile.compliance.declared_fields_by_task_type[input.action.action_type]
} else := "declared_fields"

# Object keys and object.remove, not a set difference: sets are superlinear in regopy, and an
# action may list 256 fields (kcp.lib.names; docs/engine-findings.md item 28).
_undeclared := object.remove(names.as_keys(input.action.knowledge.fields_read), _declared) if {
	is_array(_declared)
	_fields_identifiers
}

# A field name that is not an identifier is outside any declaration: the input contract refuses
# such an action, and a policy evaluated without it fails closed. (_fields_read_listed first:
# `not f(undefined)` differs between the engines, docs/engine-findings.md item 29.)
_undeclared := {names.not_an_identifier: true} if {
	is_array(_declared)
	# mutate: equivalent on OPA, where not f(undefined) is undefined anyway; regopy reads it as true (item 29)
	_fields_read_listed
	not _fields_identifiers
}

# The identifier check, once a decision (a rule, not a call in each body).
default _fields_identifiers := false

_fields_identifiers if names.identifiers(input.action.knowledge.fields_read)

# METADATA
# title: Fields read outside the declaration
# description: Sorted, each once.
outside_declaration := sort([f | _undeclared[f]]) # kcp-opa: sorted identifiers (fields_read, docs/input-contract.md)

# METADATA
# title: Findings
# custom:
#   requires: [input.action.knowledge.unit, input.action.knowledge.fields_read]
#   absent: "fields_read absent: fields_read_missing"
#   waivable: [field_access_violation]
findings contains finding if {
	count(outside_declaration) > 0
	message := concat("", ["fields read outside ", _declared_in, ": ", concat(", ", outside_declaration)])
	finding := {
		"code": "field_access_violation",
		"rule": "kcp.compliance.declared_fields",
		"state": "DENY",
		"controls": [],
		"message": message,
		"details": {"fields": outside_declaration, "fields_declared": _declared, "declared_in": _declared_in},
	}
}

# METADATA
# custom:
#   requires: [input.action.knowledge.unit]
#   absent: "fields_read_missing (this rule)"
findings contains finding if {
	_declared != null
	not _fields_read_listed
	finding := {
		"code": "fields_read_missing",
		"rule": "kcp.compliance.declared_fields",
		"state": "DENY",
		"controls": [],
		"message": "the unit declares its fields but the action does not list knowledge.fields_read",
		"details": {"fields_declared": _declared},
	}
}

# `not is_array(undefined)` is true in regopy and undefined in OPA: test a named rule instead.
_fields_read_listed if is_array(input.action.knowledge.fields_read)

# METADATA
# title: Applies (the decision plan, compile time)
# description: |
#   Whether this evaluator can find anything (or owe an obligation) for a unit of `profile` and an
#   action of type `task`, from declarations alone. `kcp-opa compile` evaluates it over every
#   profile and every action type the matrix names into the bundle's decision plan; a decision
#   reaches this evaluator only when its plan row names it (kcp.gate.planned). It may
#   over-approximate (a needless visit costs time) but never miss (a miss skips a finding). It
#   reads only its arguments and data.kcp_data, never input. docs/extending.md.
applies(profile, _) if {
	# mutate: equivalent without a profile (null) profile.compliance is undefined, so the next line fails too
	is_object(profile)
	profile.compliance.declared_fields != null
}

# A list for this task type applies on its own (validation requires declared_fields beside it).
applies(profile, task) if is_array(profile.compliance.declared_fields_by_task_type[task])
