# METADATA
# title: Control evidence
# description: |
#   Who may satisfy which control. The gate records a control result only when this
#   verdict accepts it; the decision counts only PASSED results it accepted. Authentication,
#   identity, authority, business approval and compliance review are separate controls: a
#   passed check satisfies only the control it names (contract section 5).
#   Input: {"evidence": {control, status, actor_type, actor_id, ...}, "action": <intent>,
#   "required_controls": [..]}.
# custom:
#   evaluator_id: control_evidence_check
#   evaluator_version: "1.0.0"
package kcp.controls

import rego.v1

# METADATA
# title: Actor types allowed per control
# description: Human controls never admit ai_agent; system controls never admit a person's say-so.
allowed_actors := {
	"standard_audit_logging": {"system"},
	"user_confirmation": {"user"},
	"step_up_authentication": {"user", "provider"},
	"identity_verification": {"provider", "human"},
	"authority_verification": {"system", "provider", "human"},
	"beneficiary_verification": {"system", "provider", "human"},
	"independent_human_approval": {"human"},
	"compliance_review": {"human"},
	"safe_stop": {"system", "human"},
}

# METADATA
# title: Human controls
# description: Controls that only a person can satisfy.
human_controls := {"user_confirmation", "step_up_authentication", "independent_human_approval", "compliance_review"}

_evidence := input.evidence

_control := input.evidence.control

_known if allowed_actors[_control]

_required if _control in input.required_controls

_actor_allowed if input.evidence.actor_type in allowed_actors[_control]

# The people and agents behind the action: none of them may be its independent approver.
_parties contains input.action.subject_id

_parties contains input.action.agent_id

_parties contains input.action.authorization_context.requested_by

_parties contains hop.agent_id if some hop in input.action.delegation_chain

_self_approval if {
	_control == "independent_human_approval"
	input.evidence.actor_id in _parties
}

_rejection := {"code": "unknown_control", "message": "no such control"} if {
	not _known
} else := {"code": "control_not_required", "message": "the decision does not require this control"} if {
	not _required
} else := {"code": "agent_cannot_satisfy_human_control", "message": "an AI agent cannot satisfy a human control"} if {
	input.evidence.actor_type == "ai_agent"
	_control in human_controls
} else := {"code": "actor_type_not_allowed", "message": "this actor type cannot satisfy this control"} if {
	not _actor_allowed
} else := {"code": "self_approval", "message": "the requesting subject or agent cannot approve its own action"} if {
	_self_approval
}

# METADATA
# title: Evidence verdict
# description: |
#   {"accepted": true} or {"accepted": false, "code", "message"}: the first rule that refuses
#   the evidence wins. Fail closed: anything undefined refuses.
# entrypoint: true
default verdict := {"accepted": false, "code": "evidence_unreadable", "message": "the evidence could not be judged"}

verdict := object.union({"accepted": false}, _rejection) if _rejection

verdict := {"accepted": true} if {
	is_string(input.evidence.actor_id)
	input.evidence.status in {"PASSED", "FAILED"}
	not _rejection
}
