package kcp.gate.exceptions_test

import rego.v1

import data.kcp.gate.exceptions

_field := {
	"code": "field_access_violation",
	"rule": "kcp.compliance.declared_fields",
	"evaluator_id": "field_access_check",
	"evaluator_version": "1.0.0",
	"state": "DENY",
	"controls": [],
	"message": "fields read outside declared_fields: phone",
	"details": {"fields": ["phone"]},
}

_tenant := {
	"code": "tenant_boundary",
	"rule": "kcp.runtime.tenant_boundary",
	"evaluator_id": "runtime_rules",
	"evaluator_version": "1.0.0",
	"state": "DENY",
	"controls": [],
	"message": "cross-tenant",
	"details": {},
}

_evaluated := {_field, _tenant}

_by_evaluator := {"field_access": {_field}, "runtime": {_tenant}}

# The findings of every evaluator in one set (the exceptions' own under "exceptions").
_flat(by) := {f | some name in object.keys(by); some f in by[name]}

_waivable := {"field_access_violation", "tenant_boundary_typo"}

_terminal := {"tenant_boundary"}

_params := {"exceptions": {"max_lifetime_seconds": 604800}}

_action := {
	"tenant_id": "t1",
	"agent_id": "agent-1",
	"action_type": "read",
	"knowledge": {"project": "crm", "unit": "customer-records"},
}

# Decision time 1000000; the exception runs [999000, 1003600).
_exc := {
	"id": "EXC-1", "scope": {
		"tenant_id": "t1",
		"unit": "crm/customer-records",
		"agent_id": "agent-1",
		"task_type": "read",
	},
	"waives": ["field_access_violation", "tenant_boundary"], "reason": "DPO waiver", "ticket": "CHG-2231",
	"grantor": "dpo@example.com", "expires_at": "1970-01-12T14:53:20Z",
	"not_before_epoch_seconds": 999000, "expires_epoch_seconds": 1003600,
}

_ctx(now, given) := {"decision_epoch_seconds": now, "facts_principal": "agent-1", "exceptions": given}

# Every `with` value is bound to a local first: regopy ignores `with ... as <rule>`
# (docs/engine-findings.md item 3).
_run(now, given, action) := found if {
	found := _run_with(_ctx(now, given), action, _waivable)
}

_run_with(ctx, action, waivable) := found if {
	evaluated := _by_evaluator
	terminal := _terminal
	params := _params
	by := exceptions.apply(evaluated, waivable, terminal) with input.action as action
		with input.context as ctx
		with data.kcp_data.matrix.parameters as params
	found := _flat(by)
}

# object.union merges nested objects: a narrower scope replaces the whole key.
_scoped(scope) := object.union(object.remove(_exc, ["scope"]), {"scope": scope})

_waived_codes(found) := {[f.code, f.state, object.get(f, "waived_by", "")] | some f in found}

test_a_waiver_in_scope_waives_only_the_waivable_code if {
	found := _run(1000000, [_exc], _action)
	_waived_codes(found) == {
		["field_access_violation", "ALLOW", "EXC-1"],
		["tenant_boundary", "DENY", ""],
		["exception_applied", "ALLOW", ""],
	}
	some f in found
	f.code == "exception_applied"
	f.rule == "kcp.exceptions.EXC-1"
	[c | some c in f.details.waives] == ["field_access_violation"]
	f.message == concat("", [
		"exception EXC-1 waives field_access_violation ",
		"(ticket CHG-2231, granted by dpo@example.com, until 1970-01-12T14:53:20Z)",
	])
}

test_no_exception_leaves_findings_unchanged if {
	_run(1000000, [], _action) == _evaluated
	_run(1000000, "not a list", _action) == _evaluated
}

test_expiry_to_the_second if {
	["field_access_violation", "ALLOW", "EXC-1"] in _waived_codes(_run(1003599, [_exc], _action))
	_run(1003600, [_exc], _action) == _evaluated
	_run(998999, [_exc], _action) == _evaluated
	["field_access_violation", "ALLOW", "EXC-1"] in _waived_codes(_run(999000, [_exc], _action))
}

test_another_tenant_unit_agent_or_task_is_unaffected if {
	_run(1000000, [_exc], object.union(_action, {"tenant_id": "t2"})) == _evaluated
	_run(1000000, [_exc], object.union(_action, {"knowledge": {"project": "crm", "unit": "other"}})) == _evaluated
	_run(1000000, [_exc], object.union(_action, {"action_type": "send"})) == _evaluated
	found := _run_with(object.union(_ctx(1000000, [_exc]), {"facts_principal": "agent-2"}), _action, _waivable)
	found == _evaluated
}

test_the_agent_scope_is_the_gates_principal_never_the_action if {
	found := _run_with(object.remove(_ctx(1000000, [_exc]), ["facts_principal"]), _action, _waivable)
	found == _evaluated
}

test_a_terminal_code_is_never_waived_even_if_declared_waivable if {
	found := _run_with(_ctx(1000000, [_exc]), _action, {"field_access_violation", "tenant_boundary"})
	["tenant_boundary", "DENY", ""] in _waived_codes(found)
}

test_a_code_no_rule_declares_waivable_is_not_waived if {
	found := _run_with(_ctx(1000000, [_exc]), _action, set())
	found == _evaluated
}

test_too_long_an_exception_or_an_empty_or_unknown_scope_changes_nothing if {
	_run(1000000, [object.union(_exc, {"expires_epoch_seconds": 999000 + 604801})], _action) == _evaluated
	_run(1000000, [_scoped({})], _action) == _evaluated
	_run(1000000, [_scoped({"tenant_id": "t1", "region": "EU"})], _action) == _evaluated
	_run(1000000, [object.remove(_exc, ["ticket"])], _action) == _evaluated
}

test_a_scope_of_one_key_covers_every_action_that_matches_it if {
	found := _run(1000000, [_scoped({"tenant_id": "t1"})], object.union(_action, {"action_type": "send"}))
	["field_access_violation", "ALLOW", "EXC-1"] in _waived_codes(found)
}

test_two_exceptions_the_smallest_id_waives if {
	found := _run(1000000, [object.union(_exc, {"id": "EXC-2"}), _exc], _action)
	["field_access_violation", "ALLOW", "EXC-1"] in _waived_codes(found)
	count([f | some f in found; f.code == "exception_applied"]) == 1
}

_llm := {
	"code": "external_llm_forbidden",
	"rule": "kcp.restrictions.no-external-llm",
	"evaluator_id": "restriction_check",
	"evaluator_version": "1.0.0",
	"state": "DENY",
	"controls": [],
	"message": "no-external-llm: model m is externally hosted",
	"details": {},
}

_llm_exc := object.union(_exc, {"waives": ["external_llm_forbidden"]})

# The unit crm/customer-records with the given compliance block (an index of depth 0).
_llm_run(compliance) := found if {
	by := {"restrictions": {_llm}}
	ctx := _ctx(1000000, [_llm_exc])
	action := _action
	params := _params
	units := {"depth": 0, "slots": {"crm": {"customer-records": {"profile": 0}}}}
	profiles := [{"compliance": compliance}]
	waivable := {"external_llm_forbidden"}
	terminal := _terminal
	out := exceptions.apply(by, waivable, terminal) with input.action as action
		with input.context as ctx
		with data.kcp_data.matrix.parameters as params
		with data.kcp_data.units as units
		with data.kcp_data.profiles as profiles
	found := _flat(out)
}

test_a_restriction_on_special_category_data_is_terminal_for_exceptions if {
	_waived_codes(_llm_run({"data_categories": ["health"], "restrictions": ["no-external-llm"]})) == {
		["external_llm_forbidden", "DENY", ""],
	}
	found := _llm_run({"data_categories": ["special_category"], "waivable_restrictions": ["no-ai-training"]})
	_waived_codes(found) == {["external_llm_forbidden", "DENY", ""]}
}

test_the_manifest_may_opt_a_restriction_in_on_special_category_data if {
	found := _llm_run({"data_categories": ["genetic"], "waivable_restrictions": ["no-external-llm"]})
	["external_llm_forbidden", "ALLOW", "EXC-1"] in _waived_codes(found)
}

test_a_restriction_on_other_data_stays_waivable if {
	["external_llm_forbidden", "ALLOW", "EXC-1"] in _waived_codes(_llm_run({"data_categories": ["contact"]}))
	["external_llm_forbidden", "ALLOW", "EXC-1"] in _waived_codes(_llm_run({}))
}

# A waived finding routes nothing: ALLOW, no controls, no approver, the waiver named in its
# message; the exception_applied finding is whole.
test_a_waived_finding_and_the_applied_exception_whole if {
	approval := {
		"code": "field_access_violation", "rule": "r", "evaluator_id": "field_access_check",
		"evaluator_version": "1.0.0", "state": "HUMAN_APPROVAL", "controls": ["independent_human_approval"],
		"message": "fields read outside declared_fields: phone",
		"details": {"fields": ["phone"], "approver_role": "dpo"},
	}
	evaluated := {"field_access": {approval}}
	waivable := _waivable
	terminal := _terminal
	params := _params
	action := _action
	ctx := _ctx(1000000, [_exc])
	by := exceptions.apply(evaluated, waivable, terminal) with input.action as action
		with input.context as ctx
		with data.kcp_data.matrix.parameters as params
	by.field_access == {object.union(approval, {
		"state": "ALLOW", "controls": [], "waived_by": "EXC-1",
		"message": "fields read outside declared_fields: phone (waived by exception EXC-1)",
		"details": {"fields": ["phone"]},
	})}
	by.exceptions == {{
		"code": "exception_applied", "rule": "kcp.exceptions.EXC-1", "state": "ALLOW", "controls": [],
		"message": concat("", [
			"exception EXC-1 waives field_access_violation ",
			"(ticket CHG-2231, granted by dpo@example.com, until 1970-01-12T14:53:20Z)",
		]),
		"details": {
			"exception": "EXC-1", "waives": ["field_access_violation"], "expires_at": "1970-01-12T14:53:20Z",
			"grantor": "dpo@example.com", "ticket": "CHG-2231",
		},
	}}
}

test_an_exception_of_exactly_the_maximum_lifetime_is_in_force if {
	exact := object.union(_exc, {"expires_epoch_seconds": 999000 + 604800})
	["field_access_violation", "ALLOW", "EXC-1"] in _waived_codes(_run(1000000, [exact], _action))
}

test_malformed_exceptions_waive_nothing if {
	_run(1000000, {"EXC-1": _exc}, _action) == _evaluated
	_run(1000000, [object.union(_exc, {"not_before_epoch_seconds": null})], _action) == _evaluated
	_run(1000000, [object.union(_exc, {"expires_epoch_seconds": "1003600"})], _action) == _evaluated
	_run(1000000, [object.union(_exc, {"waives": {"code": "field_access_violation"}})], _action) == _evaluated
}
