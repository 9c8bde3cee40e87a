# METADATA
# title: Exceptions (waivers)
# description: |
#   Signed, expiring exceptions the gate verified (signature by a registered issuer, a
#   registered grantor with a granting role) reach the policy in input.context.exceptions,
#   never from the action. One is in force when the decision time is in
#   [not_before, expires) to the second, its lifetime is within the matrix's
#   parameters.exceptions.max_lifetime_seconds, and every key of its scope (tenant_id, unit,
#   agent_id: the gate's principal, task_type) matches this action. It waives only the codes
#   it names that the evaluators' METADATA declares waivable (custom.waivable) and that are not
#   terminal. A restriction's finding (rule kcp.restrictions.<name>) on a unit whose data is a
#   GDPR Art. 9 special category (compliance.data_categories: health, biometric, genetic,
#   special_category) is terminal for exceptions unless the manifest lists that restriction in
#   compliance.waivable_restrictions. A waived finding stays in the decision, marked waived_by,
#   routing nothing; each exception applied adds an exception_applied reason naming it, its
#   ticket, grantor and expiry.
# custom:
#   evaluator_id: exception_check
#   evaluator_version: "1.0.0"
package kcp.gate.exceptions

import rego.v1

import data.kcp.lib.facts

_now := input.context.decision_epoch_seconds

_max_lifetime := data.kcp_data.matrix.parameters.exceptions.max_lifetime_seconds

_given := input.context.exceptions if {
	is_array(input.context.exceptions)
} else := []

_strings := ["id", "ticket", "grantor", "expires_at"]

_well_formed(e) if {
	count([k | some k in _strings; is_string(e[k])]) == count(_strings)
	is_number(e.not_before_epoch_seconds)
	is_number(e.expires_epoch_seconds)
	is_array(e.waives)
	# mutate: equivalent _in_scope needs each scope key to be a _subject name: an array or string scope matches nothing
	is_object(e.scope)
	count(e.scope) > 0
}

# What a scope key is compared with: the action's tenant, task type and unit, and the gate's
# principal (never the action's agent_id). A partial object, no `not f(k, v)` over a function
# with constant arguments (regopy reads that differently).
_subject["tenant_id"] := input.action.tenant_id

_subject["agent_id"] := input.context.facts_principal

_subject["task_type"] := input.action.action_type

_subject["unit"] := concat("/", [input.action.knowledge.project, input.action.knowledge.unit])

# Every key must match; an unknown key matches nothing (fail closed).
_in_scope(scope) if count([key | value := scope[key]; _subject[key] == value]) == count(scope)

# METADATA
# title: Exceptions in force for this action
# description: Well formed, current at the decision time, within the maximum lifetime, in scope.
in_force contains e if {
	some e in _given
	_well_formed(e)
	e.not_before_epoch_seconds <= _now
	_now < e.expires_epoch_seconds
	e.expires_epoch_seconds - e.not_before_epoch_seconds <= _max_lifetime
	_in_scope(e.scope)
}

# The code -> exception id table for the given waivable and terminal sets: for each code an
# exception in force names, that the evaluators declare waivable and that is not terminal, the
# smallest id. kcp-opa: ordered alike (ids are [A-Za-z0-9._-], identifiers)
_waivers(waivable, terminal) := {code: min({e.id | some e in in_force; code in e.waives}) |
	some code in {c | some e in in_force; some c in e.waives; c in waivable; not c in terminal}
}

# GDPR Art. 9 special categories (kcp_opa.audit.ropa.SPECIAL_CATEGORIES).
_art9 := {"health", "biometric", "genetic", "special_category"}

default _special_category := false

_special_category if {
	some category in facts.profile.compliance.data_categories
	category in _art9
}

# The restrictions the manifest lets an exception waive even on special-category data.
_opted_in := {r | some r in facts.profile.compliance.waivable_restrictions}

_restriction_prefix := "kcp.restrictions."

# The codes of restriction findings no exception may waive here: terminal on special-category data.
_locked(found) := {f.code |
	_special_category
	some f in found
	startswith(f.rule, _restriction_prefix)
	restriction := substring(f.rule, count(_restriction_prefix), -1)
	not restriction in _opted_in
}

_mark(f, id) := object.union(f, {
	"state": "ALLOW",
	"controls": [],
	"waived_by": id,
	"message": concat("", [f.message, " (waived by exception ", id, ")"]),
	"details": object.remove(f.details, ["approver_role"]),
})

_applied(e, codes) := {
	"code": "exception_applied",
	"rule": concat("", ["kcp.exceptions.", e.id]),
	"state": "ALLOW",
	"controls": [],
	"message": concat("", [
		"exception ",
		e.id,
		" waives ",
		concat(", ", codes),
		" (ticket ",
		e.ticket,
		", granted by ",
		e.grantor,
		", until ",
		e.expires_at,
		")",
	]),
	"details": {"exception": e.id, "waives": codes, "expires_at": e.expires_at, "grantor": e.grantor, "ticket": e.ticket},
}

_with_waivers(found, waiver) := kept | marked if {
	kept := {f | some f in found; not waiver[f.code]}
	marked := {_mark(f, waiver[f.code]) | some f in found; waiver[f.code]}
}

_applied_all(waiver) := {_applied(e, codes) |
	some e in in_force
	codes := sort([c | waiver[c] == e.id]) # kcp-opa: sorted identifiers (reason codes)
	count(codes) > 0
}

_by_evaluator(by_evaluator, waiver) := object.union(
	{name: _with_waivers(by_evaluator[name], waiver) | some name in object.keys(by_evaluator)},
	{"exceptions": _applied_all(waiver)},
)

# METADATA
# title: Findings by evaluator with exceptions applied
# description: |
#   The evaluators' findings (kcp.gate.evaluated_by_evaluator) with the waivable, non-terminal
#   ones an exception in force waives marked, and an exception_applied finding per exception
#   applied under "exceptions"; unchanged when no exception is in force. A function of the
#   gate's sets, so this package never reads data.kcp.gate (regopy's planner did not finish on
#   the cross-reference).
apply(by_evaluator, waivable, terminal) := by_evaluator if {
	count(in_force) == 0
} else := _by_evaluator(by_evaluator, _waivers(waivable, terminal | _locked(_all(by_evaluator))))

_all(by_evaluator) := {f | some found in by_evaluator; some f in found}
