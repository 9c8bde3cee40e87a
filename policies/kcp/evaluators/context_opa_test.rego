# kcp-opa: engines=opa
# regopy timed out (300 s) planning this test beside the others in context_test.rego, under
# `with data.kcp_data.units` and `with data.kcp_data.profiles` (docs/engine-findings.md item 12).
# The unit profiles reach the evaluator on both engines over compiled bundles in the decision cases.
package kcp.evaluators.context_opa_test

import rego.v1

import data.kcp.evaluators.context

_clock := {
	"decision_epoch_seconds": 1764410400,
	"decision_epoch_day": 20421,
	"action_created_epoch_seconds": 1764410100,
	"facts": {"evidence_status": {"value": "present", "class": "attested", "source": "test"}},
}

_bound := {
	"action_type": "read",
	"target": {"type": "customer_record", "tenant_id": "t"},
	"knowledge": {"project": "p", "unit": "u"},
	"runtime": {"budget_state": "within_budget"},
}

_all := {"parameters": {"context": {"knowledge_bound_task_types": "all"}}}

_missing(findings) := {f.details.fields[0] | some f in findings; f.code == "context_missing"}

# A unit's restrictions and visibility needs count only as lists.
test_restrictions_and_visibility_needs_that_are_not_lists_require_nothing if {
	units := {"depth": 0, "count": 1, "slots": {"p": {"u": {"profile": 0}}}}
	profiles := [{
		"compliance": {"restrictions": {"first": "no-external-llm"}},
		"effective_visibility": {"needs": {"first": "environment"}},
	}]
	a := _bound
	c := _clock
	m := _all
	_missing(context.findings) == set() with input.action as a with input.context as c with data.kcp_data.matrix as m
		with data.kcp_data.units as units with data.kcp_data.profiles as profiles
	listed := [{
		"compliance": {"restrictions": ["no-external-llm"]},
		"effective_visibility": {"needs": ["environment"]},
	}]
	_missing(context.findings) == {"input.context.facts.model_hosting", "input.context.facts.environment"}
		with input.action as a with input.context as c with data.kcp_data.matrix as m
		with data.kcp_data.units as units with data.kcp_data.profiles as listed
}
