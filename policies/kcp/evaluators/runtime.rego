# METADATA
# title: Knowledge-bound runtime rules
# description: |
#   The runtime rules of the gate contract, with their contract reason codes: tenant
#   boundary, evidence status, budget state, refunds, sending and memory writes. Risk is
#   computed from facts (kcp.lib.risk); a stated risk_level can only raise it. Evidence
#   status and the actor role are the gate's (input.context.facts, kcp.lib.trusted): a
#   statement can only make the decision stricter.
# custom:
#   evaluator_id: runtime_rules
#   evaluator_version: "1.0.0"
package kcp.evaluators.runtime

import rego.v1

import data.kcp.lib.facts
import data.kcp.lib.risk
import data.kcp.lib.trusted

_action := input.action

_runtime := object.get(input.action, "runtime", {})

_parameters := data.kcp_data.matrix.parameters

# METADATA
# title: Approver role for a task type
approver_role(task) := _parameters.approver_roles.by_task_type[task]

approver_role(task) := _parameters.approver_roles.default if not _parameters.approver_roles.by_task_type[task]

# Low risk is computed from facts (kcp.lib.risk); a stated risk_level can only raise it.
default _low_risk := false

_low_risk if risk.low

# METADATA
# title: Findings
# custom:
#   requires: [input.action.tenant_id, input.action.target.tenant_id]
findings contains finding if {
	is_string(_action.target.tenant_id)
	_action.target.tenant_id != _actor_tenant_label
	text1 := concat("", [
		"actor tenant ",
		_actor_tenant_label,
		" may not act on resource tenant ",
		_action.target.tenant_id,
	])
	finding := {
		"code": "tenant_boundary",
		"rule": "runtime.tenant_boundary",
		"state": "DENY",
		"controls": [],
		"message": text1,
		"details": {"actor_tenant": _actor_tenant_label, "resource_tenant": _action.target.tenant_id},
	}
}

# METADATA
# custom:
#   requires: []
#   facts: {evidence_status: attested}
#   absent: "evidence absent: required_evidence_not_current"
findings contains finding if {
	"forbidden" in _evidence
	finding := {
		"code": "evidence_forbidden",
		"rule": "runtime.evidence_status",
		"state": "DENY",
		"controls": [],
		"message": "the evidence for this action is forbidden",
		"details": {"evidence_status": "forbidden"},
	}
}

# METADATA
# custom:
#   requires: []
#   facts: {evidence_status: attested}
#   absent: "not attested counts as missing (this rule)"
findings contains finding if {
	some _evidence_status in _not_current
	text1 := concat(" ", ["required evidence is", _evidence_status])
	finding := {
		"code": "required_evidence_not_current",
		"rule": "runtime.evidence_status",
		"state": "ESCALATE",
		"controls": [],
		"message": text1,
		"details": {"evidence_status": _evidence_status},
	}
}

_evidence := object.get(trusted.candidates, "evidence_status", set())

_not_current contains status if {
	some status in _evidence
	status in {"missing", "stale"}
}

# An expired attestation is no longer established: the evidence is stale.
_not_current contains "not attested" if {
	facts.knowledge_bound
	not "evidence_status" in trusted.established
}

# METADATA
# custom:
#   requires: [input.action.runtime.budget_state]
findings contains finding if {
	_runtime.budget_state == "exhausted"
	finding := {
		"code": "budget_exhausted",
		"rule": "runtime.budget_state",
		"state": "ESCALATE",
		"controls": [],
		"message": "the agent's budget is exhausted",
		"details": {"budget_state": "exhausted"},
	}
}

# METADATA
# custom:
#   requires: [input.action.runtime.budget_state]
findings contains finding if {
	_runtime.budget_state == "approval_threshold"
	finding := {
		"code": "budget_approval_required",
		"rule": "runtime.budget_state",
		"state": "HUMAN_APPROVAL",
		"controls": ["independent_human_approval"],
		"message": "the action crosses the budget's approval threshold",
		"details": {"budget_state": "approval_threshold", "approver_role": approver_role(_action.action_type)},
	}
}

# METADATA
# custom:
#   requires: [input.action.action_type]
#   absent: "risk_level absent: not low"
findings contains finding if {
	_action.action_type == "refund"
	not _low_risk
	finding := {
		"code": "refund_requires_review",
		"rule": "runtime.refund",
		"state": "HUMAN_APPROVAL",
		"controls": ["independent_human_approval"],
		"message": "a refund that is not low risk needs a reviewer",
		"details": {"approver_role": approver_role("refund")},
	}
}

# METADATA
# custom:
#   requires: [input.action.action_type]
#   facts: {actor_role: gate}
#   absent: "actor_role absent: not stated, may not send"
findings contains finding if {
	_action.action_type == "send"
	some _role in _roles
	not _role in _parameters.sender_roles
	# concat, not sprintf: _role may be a computed string (docs/engine-findings.md item 13).
	text1 := concat(" ", ["role", _role, "may not send"])
	finding := {
		"code": "role_cannot_send",
		"rule": "runtime.send",
		"state": "DENY",
		"controls": [],
		"message": text1,
		"details": {"role": _role, "sender_roles": _parameters.sender_roles},
	}
}

# The gate's role and a stated one: each must be a sender. Without the gate's role the action
# may not send, whatever it states: "not established" is always a candidate then, so a stated
# sender role never lowers the DENY (a statement makes a decision stricter, never laxer).
_roles := trusted.candidates.actor_role if {
	"actor_role" in trusted.established
} else := roles if {
	roles := {"not established"} | object.get(trusted.candidates, "actor_role", set())
}

# METADATA
# custom:
#   requires: [input.action.action_type]
#   absent: "risk_level absent: not low"
findings contains finding if {
	_action.action_type == "remember"
	not _low_risk
	finding := {
		"code": "memory_write_requires_review",
		"rule": "runtime.remember",
		"state": "HUMAN_APPROVAL",
		"controls": ["independent_human_approval"],
		"message": "a memory write that is not low risk needs a reviewer",
		"details": {"approver_role": approver_role("remember")},
	}
}

# Message parts are total (a default when the value is missing): a message built from an
# undefined value would make the whole finding undefined and drop a DENY (fail open). Messages
# use concat, never sprintf over strings (docs/engine-findings.md items 13 and 19).

_actor_tenant_label := _action.tenant_id if is_string(_action.tenant_id)

_actor_tenant_label := "(no tenant)" if not _actor_tenant_label_given

_actor_tenant_label_given if is_string(_action.tenant_id)
