# METADATA
# title: Knowledge-bound runtime rules
# description: |
#   The runtime rules of the gate contract, with their contract reason codes: tenant
#   boundary, evidence status, budget state, refunds, sending and memory writes. Risk that
#   is not stated counts as not low.
# custom:
#   evaluator_id: runtime_rules
#   evaluator_version: "1.0.0"
package kcp.evaluators.runtime

import rego.v1

import data.kcp.evaluators.finding
import data.kcp.lib.facts

evaluator := {"id": "runtime_rules", "version": "1.0.0"}

_action := input.action

_runtime := object.get(input.action, "runtime", {})

_parameters := data.kcp_data.matrix.parameters

# METADATA
# title: Approver role for a task type
approver_role(task) := _parameters.approver_roles.by_task_type[task]

approver_role(task) := _parameters.approver_roles.default if not _parameters.approver_roles.by_task_type[task]

_low_risk if _runtime.risk_level == "low"

_runtime_finding(code, rule, state, controls, message, details) := finding.new(evaluator, code, rule, state, controls, message, details)

# METADATA
# title: Findings
findings contains _runtime_finding(
	"tenant_boundary", "runtime.tenant_boundary", "DENY", [],
	text1,
	{"actor_tenant": _action.tenant_id, "resource_tenant": _action.target.tenant_id},
) if {
	text1 := sprintf("actor tenant %v may not act on resource tenant %v", [_action.tenant_id, _action.target.tenant_id])
	is_string(_action.target.tenant_id)
	_action.target.tenant_id != _action.tenant_id
}

findings contains _runtime_finding(
	"evidence_forbidden", "runtime.evidence_status", "DENY", [],
	"the evidence for this action is forbidden", {"evidence_status": "forbidden"},
) if {
	_runtime.evidence_status == "forbidden"
}

findings contains _runtime_finding(
	"required_evidence_not_current", "runtime.evidence_status", "ESCALATE", [],
	text1, {"evidence_status": _evidence_status},
) if {
	text1 := concat(" ", ["required evidence is", _evidence_status])
	_evidence_status in {"missing", "stale", "not stated"}
}

_evidence_status := _runtime.evidence_status

_evidence_status := "not stated" if {
	facts.knowledge_bound
	not _runtime.evidence_status
}

findings contains _runtime_finding(
	"budget_exhausted", "runtime.budget_state", "ESCALATE", [],
	"the agent's budget is exhausted", {"budget_state": "exhausted"},
) if {
	_runtime.budget_state == "exhausted"
}

findings contains _runtime_finding(
	"budget_approval_required", "runtime.budget_state", "HUMAN_APPROVAL", ["independent_human_approval"],
	"the action crosses the budget's approval threshold",
	{"budget_state": "approval_threshold", "approver_role": approver_role(_action.action_type)},
) if {
	_runtime.budget_state == "approval_threshold"
}

findings contains _runtime_finding(
	"refund_requires_review", "runtime.refund", "HUMAN_APPROVAL", ["independent_human_approval"],
	"a refund that is not low risk needs a reviewer", {"approver_role": approver_role("refund")},
) if {
	_action.action_type == "refund"
	not _low_risk
}

findings contains _runtime_finding(
	"role_cannot_send", "runtime.send", "DENY", [],
	text1, {"role": _role, "sender_roles": _parameters.sender_roles},
) if {
	# concat, not sprintf: _role may be a computed string (docs/engine-findings.md item 13).
	text1 := concat(" ", ["role", _role, "may not send"])
	_action.action_type == "send"
	not _role in _parameters.sender_roles
}

_role := object.get(_action, ["authorization_context", "actor_role"], "not stated")

findings contains _runtime_finding(
	"memory_write_requires_review", "runtime.remember", "HUMAN_APPROVAL", ["independent_human_approval"],
	"a memory write that is not low risk needs a reviewer", {"approver_role": approver_role("remember")},
) if {
	_action.action_type == "remember"
	not _low_risk
}
