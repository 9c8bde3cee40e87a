# METADATA
# title: Control evidence
# description: |
#   Who may satisfy which control. The desk records a control result only when this verdict
#   accepts it. The evidence was signed by a registered issuer (the desk checked the
#   signature); who acted and what they are (human with roles, ai_agent, provider, system)
#   comes from the trust registry compiled into data.kcp_data.trust, never from the evidence.
#   Ids here are canonical (NFKC, casefold, trimmed; the desk canonicalises them).
#   Input: {"evidence": {control, status, actor_id, ...}, "issuer": id, "prior": [{control,
#   status}], "action": <intent>, "parties": [canonical ids], "subject": canonical id,
#   "required_controls": [..], "approver_roles": [..]}.
# custom:
#   evaluator_id: control_evidence_check
#   evaluator_version: "2.0.0"
package kcp.controls

import rego.v1

# METADATA
# title: Actor kinds allowed per control
# description: |
#   "user" is the human subject acting on their own action; any other registered human is
#   "human". Human controls never admit ai_agent; system controls never admit a person.
allowed_actors := {
	"standard_audit_logging": {"system"},
	"user_confirmation": {"user"},
	"step_up_authentication": {"user"},
	"identity_verification": {"provider", "human", "user"},
	"authority_verification": {"system", "provider", "human"},
	"beneficiary_verification": {"system", "provider", "human"},
	"independent_human_approval": {"human"},
	"compliance_review": {"human"},
	"safe_stop": {"system", "human"},
}

# METADATA
# title: Roles a control asks for, where the decision's approver roles do not decide
# description: A compliance review is a compliance officer's; other approvals take the decision's approver roles.
control_roles := {"compliance_review": {"compliance_officer"}}

_trust := data.kcp_data.trust

# METADATA
# title: Separation-of-duties controls
# description: |
#   Approval and compliance review always, plus any control the deployment's registry adds:
#   never the subject, the requester, an agent in the chain, or an ai_agent.
sod_controls := {"independent_human_approval", "compliance_review"} | {c | some c in _trust.separation_of_duties}

# METADATA
# title: Human controls
# description: Controls that only a person can satisfy.
human_controls := {"user_confirmation", "step_up_authentication"} | sod_controls

_control := input.evidence.control

_actor := input.evidence.actor_id

_principal := _trust.principals[_actor]

_allowed_kinds := allowed_actors[_control]

_allowed_kinds := {"human"} if {
	not allowed_actors[_control]
	_control in sod_controls
}

_required if _control in input.required_controls

# METADATA
# title: What the acting principal is for this action
# description: The subject acting on its own action is "user"; otherwise the registry type.
actor_kind := "user" if {
	_principal.type == "human"
	_actor == input.subject
} else := _principal.type

_issuer_allowed if _control in _trust.issuers[input.issuer].controls

_already_failed if {
	some earlier in input.prior
	earlier.control == _control
	earlier.status == "FAILED"
}

_wanted_roles := control_roles[_control] if control_roles[_control]

_wanted_roles := {r | some r in input.approver_roles} if {
	not control_roles[_control]
	count(input.approver_roles) > 0
}

# A decision that names no approver role still gets the matrix's approver for the task type:
# an approval is never open to any registered human.
_wanted_roles := {_matrix_role} if {
	not control_roles[_control]
	count(input.approver_roles) == 0
}

_approver_params := data.kcp_data.matrix.parameters.approver_roles

_matrix_role := _approver_params.by_task_type[input.action.action_type]

_matrix_role := _approver_params.default if not _approver_params.by_task_type[input.action.action_type]

_role_missing if {
	_control in sod_controls
	count(_wanted_roles & {r | some r in _principal.roles}) == 0
}

_role_missing if {
	_control in sod_controls
	not _wanted_roles
}

_rejection := {"code": "no_trust_registry", "message": "the bundle has no trust registry (compile with --trust)"} if {
	not _trust.principals
} else := {"code": "unknown_control", "message": "no such control"} if {
	not _allowed_kinds
} else := {"code": "control_not_required", "message": "the decision does not require this control"} if {
	not _required
} else := {"code": "unknown_principal", "message": "the acting principal is not in the trust registry"} if {
	not _principal
} else := {"code": "issuer_not_allowed", "message": "this issuer may not attest this control"} if {
	not _issuer_allowed
} else := {
	"code": "control_failed",
	"message": "this control already FAILED for this decision; a FAILED result is final",
} if {
	_already_failed
} else := {"code": "agent_cannot_satisfy_human_control", "message": "an AI agent cannot satisfy a human control"} if {
	_principal.type == "ai_agent"
	_control in human_controls
} else := {
	"code": "self_approval",
	"message": "the subject, requester or an agent of the chain cannot satisfy this control",
} if {
	_control in sod_controls
	_actor in input.parties
} else := {"code": "actor_type_not_allowed", "message": "this kind of principal cannot satisfy this control"} if {
	not actor_kind in _allowed_kinds
} else := {
	"code": "approver_role_mismatch",
	"message": "the approver holds none of the roles the decision asks for",
} if {
	_role_missing
}

_results := array.concat(
	[{"control": r.control, "status": r.status} | some r in input.prior],
	[{"control": _control, "status": input.evidence.status}],
)

# METADATA
# title: Satisfied controls
# description: Controls with an accepted PASSED result and no FAILED one (FAILED is terminal).
satisfied contains r.control if {
	some r in _results
	r.status == "PASSED"
	not _failed[r.control]
}

_failed contains r.control if {
	some r in _results
	r.status == "FAILED"
}

# METADATA
# title: Evidence verdict
# description: |
#   {"accepted": true, "actor_type", "satisfied"} or {"accepted": false, "code", "message"}:
#   the first rule that refuses the evidence wins. Fail closed: anything undefined refuses.
# entrypoint: true
default verdict := {"accepted": false, "code": "evidence_unreadable", "message": "the evidence could not be judged"}

verdict := object.union({"accepted": false}, _rejection) if _rejection

verdict := {"accepted": true, "actor_type": actor_kind, "satisfied": sort(satisfied)} if {
	# mutate: equivalent a non-string actor_id names no principal (the registry's keys are strings): unknown_principal
	is_string(_actor)
	input.evidence.status in {"PASSED", "FAILED"}
	not _rejection
}
