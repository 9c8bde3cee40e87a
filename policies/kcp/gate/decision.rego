# METADATA
# title: The gate decision
# description: |
#   The one entrypoint: every evaluator's findings accumulate, the strongest routing state
#   wins, controls are the union of every finding's controls plus standard_audit_logging,
#   and anything undefined falls to the default: a fail-closed DENY.
#   Input: {"action": <action intent>, "context": {"decision_epoch_day": int,
#   "satisfied_controls": [..]}}. Time comes only from input.
package kcp.gate

import rego.v1

import data.kcp.lib.facts
import data.kcp.lib.risk
import data.kcp.lib.routing

# The gate reads the evaluators only through the union generated from their METADATA into
# evaluators.rego (`kcp-opa generate`; docs/extending.md): `evaluators` (each one's id and
# version), `findings_by_evaluator`, `evaluator_obligations` and `evaluator_risk_floor`. No
# evaluator is imported by name, so a new one joins the decision without an edit here.

_states := {f.state | some found in findings_by_evaluator; some f in found}

# METADATA
# title: Routing state
# description: The strongest state any finding asks for; ALLOW when none does.
state := routing.strongest(_states)

# Control sets are computed with set operations: regopy evaluates `not c in xs` per element
# several times slower (docs/performance.md).
_required := {c | some found in findings_by_evaluator; some f in found; some c in f.controls} | _always_required

_always_required := {"standard_audit_logging"}

_claimed := {c | some c in input.context.satisfied_controls} if {
	is_array(input.context.satisfied_controls)
} else := set()

# A DENY lists no controls: controls are preconditions of an execution and a denied action has
# none; listing the findings' controls would invite approvals for a forbidden action
# (docs/contract.md). The findings' controls still weigh on the risk level (_required) and the
# reasons name them. The denial itself is still written to the audit ledger.
_listed := set() if {
	state == "DENY"
} else := _required

_satisfied := _listed & _claimed

_missing := _listed - _satisfied

# METADATA
# title: Required controls
# description: The union of every finding's controls plus standard_audit_logging; none on a DENY.
required_controls := sort(_listed)

# METADATA
# title: Satisfied controls
# description: Controls recorded as satisfied (input.context), limited to the required ones.
satisfied_controls := sort(_satisfied)

# METADATA
# title: Missing controls
# description: Required controls not yet satisfied; always empty on a DENY.
missing_controls := sort(_missing)

# METADATA
# title: Authorization status
authorization_status := "DENIED" if {
	state == "DENY"
} else := "PENDING_CONTROLS" if {
	_pending
} else := "APPROVED" if {
	state
}

default _pending := false

_pending if routing.properties[state].hold

_pending if count(_missing) > 0

_unit_ref := concat("/", [input.action.knowledge.project, input.action.knowledge.unit]) if facts.knowledge_bound

_passed := {
	"code": "policy_passed",
	"rule": "kcp.gate.default",
	"evaluator_id": "kcp_gate",
	"evaluator_version": "1.0.0",
	"message": "no rule matched",
}

# Each reason is built once, from the finding and its evaluator's entry in the generated table.
_reasons contains r if {
	facts.knowledge_bound
	some name, found in findings_by_evaluator
	some f in found
	ev := evaluators[name]
	r := {
		"code": f.code,
		"rule": f.rule,
		"unit": _unit_ref,
		"evaluator_id": ev.evaluator_id,
		"evaluator_version": ev.evaluator_version,
		"message": f.message,
	}
}

_reasons contains r if {
	not facts.knowledge_bound
	some name, found in findings_by_evaluator
	some f in found
	ev := evaluators[name]
	r := {
		"code": f.code,
		"rule": f.rule,
		"evaluator_id": ev.evaluator_id,
		"evaluator_version": ev.evaluator_version,
		"message": f.message,
	}
}

# METADATA
# title: Reasons
# description: |
#   Every matched rule, ordered by code (then evaluator, message, rule); policy_passed when
#   none matched. Sorting the set of reason objects is one pass in both engines, where pairing
#   sorted keys back to findings cost O(n^2) (docs/performance.md).
reasons := sort(_reasons) if {
	count(_states) > 0
} else := [_passed]

# METADATA
# title: Reason codes
# description: The distinct codes of the reasons, sorted (two matrix cells may give the same code).
reason_codes := sort({r.code | some r in reasons})

# METADATA
# title: Violations
# description: Evaluator details that name fields, e.g. the fields read outside declared_fields.
violations := sort(_violations)

_violations contains v if {
	some name, found in findings_by_evaluator
	some f in found
	f.details.fields
	v := {"evaluator_id": evaluators[name].evaluator_id, "code": f.code, "fields": f.details.fields}
}

# METADATA
# title: Obligations
# description: What the caller must do even on allow.
obligations := sort(_obligations | evaluator_obligations)

_obligations contains "audit" if facts.restricted("audit-required")

_obligations contains "audit" if facts.profile.trust.agent_must_log == true

_obligations contains "redact_content" if facts.restricted("no-logging")

_finding_roles := {r | some found in findings_by_evaluator; some f in found; r := f.details.approver_role}

_approver_roles := data.kcp_data.matrix.parameters.approver_roles

# The matrix's approver for the task type, else its default approver.
_task_approver := _approver_roles.by_task_type[input.action.action_type]

_task_approver := _approver_roles.default if not _approver_roles.by_task_type[input.action.action_type]

# METADATA
# title: Approver roles
# description: |
#   Who may approve: the roles the findings name; when a human approval is required and no
#   finding names a role, the matrix's approver for the task type (approver_roles.by_task_type,
#   else approver_roles.default). Empty on a DENY: nobody approves a forbidden action.
approver_roles := [] if {
	state == "DENY"
} else := sort(_finding_roles) if {
	count(_finding_roles) > 0
} else := [role] if {
	"independent_human_approval" in _required
	role := _task_approver
} else := []

# A lookup, not upper(): regopy's case builtins are ASCII-only (docs/engine-findings.md item 26).
# Computed from facts; a stated runtime.risk_level can only raise it (kcp.lib.risk).
_runtime_risk := risk.level

default _critical := false

_critical if "compliance_review" in _required

_critical if _runtime_risk == "CRITICAL"

_critical if "CRITICAL" in evaluator_risk_floor

default _high := false

_high if "HIGH" in evaluator_risk_floor

_high if state == "DENY"

_high if _runtime_risk == "HIGH"

default _medium := false

_medium if "MEDIUM" in evaluator_risk_floor

_medium if state != "ALLOW"

_medium if _runtime_risk == "MEDIUM"

# METADATA
# title: Risk level
# description: |
#   The highest that applies: CRITICAL (compliance review, or the runtime says so), HIGH
#   (high value, a DENY, or the runtime says so), MEDIUM (value transfer, anything short
#   of ALLOW, or the runtime says so), else LOW.
risk_level := "CRITICAL" if {
	_critical
} else := "HIGH" if {
	_high
} else := "MEDIUM" if {
	_medium
} else := "LOW"

# METADATA
# title: The decision
# description: The contract's decision document (Python adds ids, hashes and bundle revision).
# entrypoint: true
default decision := {
	"decision": "DENY",
	"outcome": "deny",
	"authorization_status": "DENIED",
	"execution_allowed": false,
	"risk_level": "CRITICAL",
	"required_controls": [],
	"satisfied_controls": [],
	"missing_controls": [],
	"reasons": [{
		"code": "policy_undefined",
		"rule": "kcp.gate.default",
		"evaluator_id": "kcp_gate",
		"evaluator_version": "1.0.0",
		"message": "the policy produced no decision; failing closed",
	}],
	"reason_codes": ["policy_undefined"],
	"violations": [],
	"obligations": ["audit"],
	"approver_roles": [],
}

decision := {
	"decision": state,
	"outcome": routing.properties[state].outcome,
	"authorization_status": authorization_status,
	"execution_allowed": authorization_status == "APPROVED",
	"risk_level": risk_level,
	"required_controls": required_controls,
	"satisfied_controls": satisfied_controls,
	"missing_controls": missing_controls,
	"reasons": reasons,
	"reason_codes": reason_codes,
	"violations": violations,
	"obligations": obligations,
	"approver_roles": approver_roles,
}
