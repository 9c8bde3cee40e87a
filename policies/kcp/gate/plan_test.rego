# kcp-opa: engines=opa
# regopy aborts planning the `planned` tests under `with input.action` (docs/engine-findings.md hazard 4)
# and answers the `not applies(...) with data...` lines undefined (the `not` under `with` of item 29).
# regopy's own answer is checked where it is used: tests/adversarial/test_decision_plan.py compares the
# plan regopy computes at compile time with OPA's for every reference deployment, and the decision
# cases run every planned decision on both engines.
package kcp.gate.plan_test

# The decision plan: each evaluator's applies(profile, task) (evaluated by `kcp-opa compile`), and
# the gate reaching only the evaluators a plan row names. A plan that misses an evaluator skips
# its findings, so every applies body has a case where it must hold and one where it must not.

import rego.v1

import data.kcp.evaluators.access
import data.kcp.evaluators.authority
import data.kcp.evaluators.budget
import data.kcp.evaluators.delegation
import data.kcp.evaluators.field_access
import data.kcp.evaluators.freshness
import data.kcp.evaluators.lifecycle
import data.kcp.evaluators.matrix
import data.kcp.evaluators.residency
import data.kcp.evaluators.restrictions
import data.kcp.evaluators.trace
import data.kcp.gate

test_access_applies_to_authenticated_restricted_and_requires_auth if {
	access.applies({"access": "authenticated"}, "read")
	access.applies({"access": "restricted"}, "read")
	not access.applies({"access": "public"}, "read")
	not access.applies({"access": "secret"}, "read")
	access.applies({"effective_visibility": {"cells": {"": {"agent": {"requires_auth": true}}}}}, "read")
	not access.applies({"effective_visibility": {"cells": {"": {"agent": {"requires_auth": false}}}}}, "read")
	access.applies({"effective_visibility": {"cells": {}, "incomplete": {"requires_auth": true}}}, "read")
	not access.applies({"effective_visibility": {"cells": {}, "incomplete": {"requires_auth": false}}}, "read")
	not access.applies(null, "read")
}

_actions := {"read": "read", "delete": "modify", "publish": "custom_publish"}

test_authority_applies_where_the_mapped_action_is_not_initiative if {
	declared := {"authority": {"declared": true, "actions": {"read": "initiative", "modify": "requires_approval"}}}
	not authority.applies(declared, "read") with data.kcp_data.matrix.kcp_actions as _actions
	authority.applies(declared, "delete") with data.kcp_data.matrix.kcp_actions as _actions
	authority.applies(declared, "publish") with data.kcp_data.matrix.kcp_actions as _actions
	authority.applies(declared, "unmapped") with data.kcp_data.matrix.kcp_actions as _actions
}

test_authority_reads_the_units_own_actions_and_defaults_only_without_them if {
	own := {"authority": {"declared": false, "actions": {"modify": "initiative"}}}
	not authority.applies(own, "delete") with data.kcp_data.matrix.kcp_actions as _actions
	broken := {"authority": {"declared": false, "actions": "none"}}
	not authority.applies(broken, "read") with data.kcp_data.matrix.kcp_actions as _actions
	authority.applies(broken, "delete") with data.kcp_data.matrix.kcp_actions as _actions
}

test_authority_uses_the_safe_defaults_and_ignores_unmapped_types_when_undeclared if {
	undeclared := {"authority": {"declared": false}}
	not authority.applies(undeclared, "read") with data.kcp_data.matrix.kcp_actions as _actions
	authority.applies(undeclared, "delete") with data.kcp_data.matrix.kcp_actions as _actions
	not authority.applies(undeclared, "unmapped") with data.kcp_data.matrix.kcp_actions as _actions
	not authority.applies(null, "delete") with data.kcp_data.matrix.kcp_actions as _actions
}

test_budget_applies_to_budgeted_types_velocity_and_rate_limits if {
	params := {"budgets": [{"task_types": ["refund"]}], "velocity": []}
	budget.applies(null, "refund") with data.kcp_data.matrix.parameters as params
	not budget.applies(null, "read") with data.kcp_data.matrix.parameters as params
	budget.applies(null, "read") with data.kcp_data.matrix.parameters as {"budgets": [{"task_types": "all"}]}
	budget.applies(null, "read") with data.kcp_data.matrix.parameters as {"velocity": [{"id": "v"}]}
	not budget.applies(null, "read") with data.kcp_data.matrix.parameters as {}
	limited := {"rate_limits": {"default": {"requests_per_hour": 10}}}
	budget.applies(limited, "read") with data.kcp_data.matrix.parameters as {}
	unlimited := {"rate_limits": {"default": {"requests_per_hour": null, "burst": 5}}}
	not budget.applies(unlimited, "read") with data.kcp_data.matrix.parameters as {}
}

test_delegation_applies_with_a_depth_or_attenuation if {
	delegation.applies({"delegation": {"max_depth": 2}}, "read")
	not delegation.applies({"delegation": {"max_depth": null}}, "read")
	delegation.applies({"delegation": {"require_capability_attenuation": true}}, "read")
	not delegation.applies({"delegation": {"require_capability_attenuation": false}}, "read")
}

test_field_access_applies_with_declared_fields_even_empty if {
	field_access.applies({"compliance": {"declared_fields": []}}, "read")
	not field_access.applies({"compliance": {"declared_fields": null}}, "read")
	not field_access.applies({"compliance": {}}, "read")
	not field_access.applies(null, "read")
}

test_freshness_applies_with_a_policy if {
	freshness.applies({"freshness": {"max_age_days": 30}}, "read")
	not freshness.applies({"freshness": null}, "read")
}

test_lifecycle_applies_with_bounds_not_for_or_deprecation if {
	lifecycle.applies({"temporal": {"from_epoch_seconds": 1}}, "read")
	lifecycle.applies({"temporal": {"until_epoch_seconds": 1}}, "read")
	not lifecycle.applies({"temporal": {"from_epoch_seconds": null, "until_epoch_seconds": null}}, "read")
	lifecycle.applies({"not_for": ["training"]}, "read")
	not lifecycle.applies({"not_for": [7]}, "read")
	lifecycle.applies({"deprecated": true}, "read")
	not lifecycle.applies({"deprecated": false, "not_for": []}, "read")
}

_tasks := {"depth": 0, "count": 1, "slots": {"read": {
	"data_categories": {"health": "autonomous", "financial": "approve"},
	"sensitivity": {"internal": "autonomous", "confidential": "confirm"},
}}}

_visible(sensitivity) := {"effective_visibility": {
	"cells": {"": {"": {"sensitivity": sensitivity}}},
	"incomplete": {"sensitivity": sensitivity},
}}

test_matrix_applies_to_unlisted_types_and_cells_short_of_autonomous if {
	matrix.applies(null, "send") with data.kcp_data.tasks as _tasks
	not matrix.applies(null, "read") with data.kcp_data.tasks as _tasks
	not matrix.applies(_visible("internal"), "read") with data.kcp_data.tasks as _tasks
	matrix.applies(_visible("confidential"), "read") with data.kcp_data.tasks as _tasks
	matrix.applies(_visible("secret"), "read") with data.kcp_data.tasks as _tasks
	health := object.union(_visible("internal"), {"compliance": {"data_categories": ["health"]}})
	not matrix.applies(health, "read") with data.kcp_data.tasks as _tasks
	money := object.union(_visible("internal"), {"compliance": {"data_categories": ["financial"]}})
	matrix.applies(money, "read") with data.kcp_data.tasks as _tasks
	matrix.applies({"compliance": {}}, "read") with data.kcp_data.tasks as _tasks # no visibility: "undeclared"
}

test_matrix_counts_the_incomplete_view_and_every_cell if {
	incomplete := {"effective_visibility": {
		"cells": {"": {"": {"sensitivity": "internal"}}},
		"incomplete": {"sensitivity": "confidential"},
	}}
	matrix.applies(incomplete, "read") with data.kcp_data.tasks as _tasks
	cells := {"effective_visibility": {"cells": {
		"prod": {"": {"sensitivity": "confidential"}},
		"": {"": {"sensitivity": "internal"}},
	}}}
	matrix.applies(cells, "read") with data.kcp_data.tasks as _tasks
}

test_residency_applies_with_a_residency_list if {
	residency.applies({"compliance": {"data_residency": []}}, "read")
	not residency.applies({"compliance": {"data_residency": null}}, "read")
}

test_restrictions_apply_with_their_restrictions_or_human_in_the_loop if {
	restrictions.applies({"compliance": {"restrictions": ["no-external-llm"]}}, "read")
	restrictions.applies({"compliance": {"restrictions": ["no-ai-training"]}}, "read")
	restrictions.applies({"compliance": {"restrictions": ["human-approval-required"]}}, "read")
	not restrictions.applies({"compliance": {"restrictions": ["audit-required", "no-cross-border"]}}, "read")
	restrictions.applies({"delegation": {"human_in_the_loop": {"required": true}}}, "read")
	not restrictions.applies({"delegation": {"human_in_the_loop": {"required": false}}}, "read")
}

test_trace_applies_when_trace_context_or_an_audit_chain_is_required if {
	trace.applies({"trust": {"require_trace_context": true}}, "read")
	trace.applies({"delegation": {"audit_chain": true}}, "read")
	not trace.applies({"trust": {"require_trace_context": false}, "delegation": {"audit_chain": false}}, "read")
}

_plan := {
	"profiles": [{"types": {"read": ["residency"]}, "other": ["matrix", "residency"]}],
	"unbound": {"types": {}, "other": ["budget"]},
}

_units := {"depth": 0, "count": 1, "slots": {"p": {"u": {"profile": 0}}}}

_on(unit, type) := {"action_type": type, "knowledge": {"project": "p", "unit": unit}}

test_a_decision_reaches_its_rows_evaluators_and_the_always_planned if {
	planned := gate.planned with input.action as _on("u", "read")
		with data.kcp_data.plan as _plan with data.kcp_data.units as _units with data.kcp_data.profiles as [{}]
	planned == gate.always_planned | {"residency"}
}

test_an_unnamed_type_takes_the_rows_other if {
	planned := gate.planned with input.action as _on("u", "launch")
		with data.kcp_data.plan as _plan with data.kcp_data.units as _units with data.kcp_data.profiles as [{}]
	planned == gate.always_planned | {"matrix", "residency"}
}

test_a_unit_whose_profile_does_not_resolve_takes_the_unbound_row if {
	planned := gate.planned with input.action as _on("u", "read")
		with data.kcp_data.plan as _plan with data.kcp_data.units as _units with data.kcp_data.profiles as []
	planned == gate.always_planned | {"budget"}
}

test_an_unknown_unit_takes_the_unbound_row if {
	planned := gate.planned with input.action as _on("nope", "read")
		with data.kcp_data.plan as _plan with data.kcp_data.units as _units with data.kcp_data.profiles as [{}]
	planned == gate.always_planned | {"budget"}
}

test_without_a_plan_every_evaluator_is_reached if {
	planned := gate.planned with input.action as _on("u", "read")
		with data.kcp_data.units as _units with data.kcp_data.profiles as [{}]
	planned == object.keys(gate.evaluators) - {"exceptions"}
}

test_only_planned_evaluators_findings_are_read if {
	# the unit is unknown, so unit finds unknown_unit; the plan's unbound row names no residency
	found := gate.evaluated_by_evaluator with input.action as _on("nope", "read")
		with data.kcp_data.plan as _plan with data.kcp_data.units as _units with data.kcp_data.profiles as [{}]
	count(found.unit) == 1
	not found.residency
	not found.matrix
}

_full := {
	"access": "authenticated",
	"authority": {"declared": true},
	"delegation": {"max_depth": 2},
	"compliance": {"declared_fields": [], "data_residency": ["EU"], "restrictions": ["no-external-llm"]},
	"freshness": {"max_age_days": 30},
	"deprecated": true,
	"trust": {"require_trace_context": true},
}

_every_plannable := [
	"access", "authority", "budget", "delegation", "field_access", "freshness",
	"lifecycle", "matrix", "residency", "restrictions", "trace",
]

test_the_plan_table_lists_each_profiles_evaluators_per_action_type if {
	table := gate.plan_table with data.kcp_data.profiles as [_full, {}]
		with input.task_types as ["read"] with input.other as "kcp-opa:unnamed"
		with data.kcp_data.tasks as {"depth": 0, "count": 1, "slots": {"read": {"sensitivity": {"undeclared": "autonomous"}}}}
		with data.kcp_data.matrix as {"kcp_actions": {"read": "read"}, "parameters": {"velocity": [{"id": "v"}]}}
	table.profiles[0].other == _every_plannable
	table.profiles[0].types == [[n | some n in _every_plannable; not n in {"authority", "matrix"}]]
	table.profiles[1] == {"types": [["budget"]], "other": ["budget", "matrix"]}
	table.unbound == {"types": [["budget"]], "other": ["budget", "matrix"]}
}
