# The floor of one support-desk read on the engine we ship (bench/bench_floor.py).
#
# Every lookup the shipped policy makes for the read `sd-read-clean`, written as cheaply as
# Rego allows: one rule, no set built, no helper rule, the decision plan's row read from the
# bundle's data. It is not a policy (it knows this one read's answer and checks only that every
# condition of that answer holds): a lower bound on what any policy making these lookups pays.
package floor

import rego.v1

# The whole decision document, as the shipped policy answers it.
decision := {
	"decision": "ALLOW",
	"outcome": "allow",
	"authorization_status": "PENDING_CONTROLS",
	"execution_allowed": false,
	"risk_level": "LOW",
	"required_controls": ["standard_audit_logging"],
	"satisfied_controls": input.context.satisfied_controls,
	"missing_controls": ["standard_audit_logging"],
	"reasons": [{
		"code": "policy_passed",
		"rule": "kcp.gate.default",
		"evaluator_id": "kcp_gate",
		"evaluator_version": "1.0.0",
		"message": "no rule matched",
	}],
	"reason_codes": ["policy_passed"],
	"violations": [],
	"obligations": obligations,
	"approver_roles": [],
} if {
	a := input.action
	ctx := input.context
	facts := ctx.facts
	params := data.kcp_data.matrix.parameters
	h := crypto.sha256(concat("/", [a.knowledge.project, a.knowledge.unit]))
	entry := data.kcp_data.units.slots[indexof("0123456789abcdef", substring(h, 0, 1))][a.knowledge.project][a.knowledge.unit]
	profile := data.kcp_data.profiles[entry.profile]
	row := data.kcp_data.plan.profiles[entry.profile].types[a.action_type]
	count(row) > 0
	is_number(ctx.decision_epoch_seconds)
	is_number(ctx.decision_epoch_day)
	is_number(ctx.action_created_epoch_seconds)
	is_string(a.target.tenant_id)
	is_string(a.runtime.budget_state)
	facts.evidence_status.value
	facts.deployment_region.value
	ctx.decision_epoch_seconds - ctx.action_created_epoch_seconds <= params.context.max_action_age_seconds
	ctx.action_created_epoch_seconds - ctx.decision_epoch_seconds <= params.context.max_future_skew_seconds
	profile.access == "authenticated"
	a.authorization_context.authenticated_principal == a.authorization_context.requested_by
	count(object.get(a, "delegation_chain", [])) <= profile.delegation.max_depth
	declared := profile.compliance.declared_fields
	every f in a.knowledge.fields_read {
		f in declared
	}
	ctx.decision_epoch_day - entry.validated_epoch_day <= profile.freshness.max_age_days
	facts.deployment_region.value in profile.compliance.data_residency
	a.target.tenant_id == a.tenant_id
	a.requested_action in facts.agent_scope.value
	"audit-required" in profile.compliance.restrictions
	obligations := ["audit"]
}
