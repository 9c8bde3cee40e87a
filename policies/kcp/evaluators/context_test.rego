package kcp.evaluators.context_test

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

_all := {
	"parameters": {
		"context": {"knowledge_bound_task_types": "all", "max_action_age_seconds": 86400, "max_future_skew_seconds": 900},
	},
}

_reads_only := {
	"parameters": {
		"context": {"knowledge_bound_task_types": ["read"], "max_action_age_seconds": 3600, "max_future_skew_seconds": 60},
	},
}

_codes(findings) := {f.code | some f in findings}

_paths(findings) := {f.details.fields[0] | some f in findings; f.code == "context_missing"}

test_complete_context_has_no_finding if {
	c := _clock
	a := _bound
	m := _all
	count(context.findings) == 0 with input.action as a with input.context as c with data.kcp_data.matrix as m
}

test_missing_resource_tenant_is_named if {
	c := _clock
	a := {
		"action_type": "read",
		"target": {"type": "customer_record"},
		"knowledge": {"project": "p", "unit": "u"},
		"runtime": {"budget_state": "within_budget"},
	}
	m := _all
	_paths(context.findings) == {"input.action.target.tenant_id"}
		with input.action as a
		with input.context as c
		with data.kcp_data.matrix as m
	{f.state | some f in context.findings} == {"ESCALATE"}
		with input.action as a
		with input.context as c
		with data.kcp_data.matrix as m
}

test_missing_budget_state_is_named if {
	c := _clock
	a := {
		"action_type": "read",
		"target": {"type": "customer_record", "tenant_id": "t"},
		"knowledge": {"project": "p", "unit": "u"},
		"runtime": {},
	}
	m := _all
	_paths(context.findings) == {"input.action.runtime.budget_state"}
		with input.action as a
		with input.context as c
		with data.kcp_data.matrix as m
}

test_knowledge_bound_by_default if {
	c := _clock
	a := {
		"action_type": "read",
		"target": {"type": "customer_record", "tenant_id": "t"},
		"runtime": {"budget_state": "within_budget"},
	}
	m := _all
	_paths(context.findings) == {"input.action.knowledge.project", "input.action.knowledge.unit"}
		with input.action as a
		with input.context as c
		with data.kcp_data.matrix as m
}

test_no_settings_in_data_means_all_bound if {
	c := _clock
	a := {
		"action_type": "read",
		"target": {"type": "customer_record", "tenant_id": "t"},
		"runtime": {"budget_state": "within_budget"},
	}
	m := {"parameters": {}}
	_paths(context.findings) == {"input.action.knowledge.project", "input.action.knowledge.unit"}
		with input.action as a
		with input.context as c
		with data.kcp_data.matrix as m
}

test_unbound_task_type_needs_only_the_clock if {
	c := _clock
	a := {"action_type": "notify", "target": {"type": "email"}}
	m := _reads_only
	count(context.findings) == 0 with input.action as a with input.context as c with data.kcp_data.matrix as m
	b := json.patch(a, [{"op": "replace", "path": "/action_type", "value": "read"}])
	count(_paths(context.findings)) == 4 with input.action as b with input.context as c with data.kcp_data.matrix as m
}

test_an_unbound_payment_needs_the_gate_facts_of_a_transfer_to_a_beneficiary if {
	c := _clock
	a := {"action_type": "payment", "target": {"type": "beneficiary"}}
	m := _reads_only
	_paths(context.findings) == _transfer_facts | {"input.action.target.tenant_id"}
		with input.action as a
		with input.context as c
		with data.kcp_data.matrix as m
}

_transfer_facts := {
	"input.context.facts.agent_scope",
	"input.context.facts.new_beneficiary",
	"input.context.facts.modified_beneficiary",
	"input.context.facts.screening_uncertain",
}

test_a_value_transfer_needs_the_resource_tenant if {
	c := _clock
	m := _reads_only
	a := {"action_type": "payment", "target": {"type": "beneficiary"}}
	"input.action.target.tenant_id" in _paths(context.findings)
		with input.action as a
		with input.context as c
		with data.kcp_data.matrix as m
	# any positive amount is a value transfer, whatever the action type says
	b := {"action_type": "notify", "target": {"type": "email"}, "amount": {"value_minor": 1, "currency": "EUR"}}
	_paths(context.findings) == {"input.action.target.tenant_id", "input.context.facts.agent_scope"}
		with input.action as b
		with input.context as c
		with data.kcp_data.matrix as m
	t := json.patch(a, [{"op": "add", "path": "/target/tenant_id", "value": "tenant_demo"}])
	_paths(context.findings) == _transfer_facts
		with input.action as t
		with input.context as c
		with data.kcp_data.matrix as m
	# a target type the deployment declares outside every tenant (an external payee) needs none
	e := json.patch(m, [{"op": "add", "path": "/parameters/context/external_target_types", "value": ["beneficiary"]}])
	_paths(context.findings) == _transfer_facts
		with input.action as a
		with input.context as c
		with data.kcp_data.matrix as e
	o := json.patch(a, [{"op": "replace", "path": "/target/type", "value": "account"}])
	_paths(context.findings) == {"input.action.target.tenant_id", "input.context.facts.agent_scope"}
		with input.action as o
		with input.context as c
		with data.kcp_data.matrix as e
}

test_naming_a_unit_binds_any_task_type if {
	c := _clock
	a := {"action_type": "payment", "target": {"type": "beneficiary"}, "knowledge": {"project": "p", "unit": "u"}}
	m := _reads_only
	_paths(context.findings) == {
		"input.action.target.tenant_id",
		"input.action.runtime.budget_state",
		"input.context.facts.agent_scope",
		"input.context.facts.new_beneficiary",
		"input.context.facts.modified_beneficiary",
		"input.context.facts.screening_uncertain",
	}
		with input.action as a
		with input.context as c
		with data.kcp_data.matrix as m
}

test_missing_clock_is_named if {
	a := _bound
	m := _all
	_paths(context.findings) == {
		"input.context.decision_epoch_seconds",
		"input.context.decision_epoch_day",
		"input.context.action_created_epoch_seconds",
		"input.context.facts.evidence_status",
	}
		with input.action as a
		with data.kcp_data.matrix as m
}

test_stale_and_skewed_actions if {
	a := _bound
	m := _all
	old := object.union(_clock, {"action_created_epoch_seconds": 1764410400 - 86401})
	_codes(context.findings) == {"action_stale"}
		with input.action as a
		with input.context as old
		with data.kcp_data.matrix as m
	edge := object.union(_clock, {"action_created_epoch_seconds": 1764410400 - 86400})
	count(context.findings) == 0 with input.action as a with input.context as edge with data.kcp_data.matrix as m
	ahead := object.union(_clock, {"action_created_epoch_seconds": 1764410400 + 901})
	_codes(context.findings) == {"clock_skew"}
		with input.action as a
		with input.context as ahead
		with data.kcp_data.matrix as m
	skew := object.union(_clock, {"action_created_epoch_seconds": 1764410400 + 900})
	count(context.findings) == 0 with input.action as a with input.context as skew with data.kcp_data.matrix as m
}

test_window_is_the_deployments if {
	a := _bound
	m := _reads_only
	hour := object.union(_clock, {"action_created_epoch_seconds": 1764410400 - 3601})
	_codes(context.findings) == {"action_stale"}
		with input.action as a
		with input.context as hour
		with data.kcp_data.matrix as m
	minute := object.union(_clock, {"action_created_epoch_seconds": 1764410400 + 61})
	_codes(context.findings) == {"clock_skew"}
		with input.action as a
		with input.context as minute
		with data.kcp_data.matrix as m
}

# Only a value transfer needs the beneficiary facts: a notice to a beneficiary moves no money.
test_an_unbound_notice_to_a_beneficiary_needs_only_the_clock if {
	c := _clock
	a := {"action_type": "notify", "target": {"type": "beneficiary"}}
	m := _reads_only
	count(context.findings) == 0 with input.action as a with input.context as c with data.kcp_data.matrix as m
}

# What kcp-opa's tooling reads as every path this evaluator can ask for: exactly these.
test_required_paths_are_every_path_it_can_require if {
	context.required_paths == {
		"input.context.decision_epoch_seconds",
		"input.context.decision_epoch_day",
		"input.context.action_created_epoch_seconds",
		"input.action.knowledge.project",
		"input.action.knowledge.unit",
		"input.action.target.tenant_id",
		"input.action.runtime.budget_state",
		"input.context.facts.evidence_status",
		"input.context.facts.environment",
		"input.context.facts.actor_role",
		"input.context.facts.deployment_region",
		"input.context.facts.model_hosting",
		"input.context.facts.agent_scope",
		"input.context.facts.new_beneficiary",
		"input.context.facts.modified_beneficiary",
		"input.context.facts.screening_uncertain",
	}
}

test_bound_task_types_that_are_not_a_list_bind_nothing if {
	a := {"action_type": "read", "target": {"type": "customer_record"}}
	m := {"parameters": {"context": {"knowledge_bound_task_types": {"first": "read"}}}}
	not context.bound with input.action as a with data.kcp_data.matrix as m
}

# A clock that is not a number is missing, never a stale or skewed action (and never an error).
test_a_clock_that_is_not_a_number_is_missing_not_stale if {
	a := _bound
	m := _all
	now := object.union(_clock, {"decision_epoch_seconds": "1764410400"})
	_codes(context.findings) == {"context_missing"} with input.action as a with input.context as now
		with data.kcp_data.matrix as m
	created := object.union(_clock, {"action_created_epoch_seconds": "1764410100"})
	_paths(context.findings) == {"input.context.action_created_epoch_seconds"} with input.action as a
		with input.context as created with data.kcp_data.matrix as m
}
