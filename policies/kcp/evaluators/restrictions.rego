# METADATA
# title: KCP restrictions
# description: |
#   no-external-llm, no-ai-training and human-approval-required (or the delegation block's
#   human_in_the_loop.required). A restriction the action cannot be checked against (no
#   runtime.model.hosting under no-external-llm) denies: missing context never allows.
# custom:
#   evaluator_id: restriction_check
#   evaluator_version: "1.0.0"
package kcp.evaluators.restrictions

import rego.v1

import data.kcp.evaluators.finding
import data.kcp.lib.facts

evaluator := {"id": "restriction_check", "version": "1.0.0"}

_hosting := input.action.runtime.model.hosting

_hosting_given if is_string(input.action.runtime.model.hosting)

# METADATA
# title: Findings
findings contains finding.new(
	evaluator, "external_llm_forbidden", "kcp.restrictions.no-external-llm", "DENY", [],
	text1,
	{"model": input.action.runtime.model},
) if {
	text1 := sprintf("no-external-llm: model %v is externally hosted", [input.action.runtime.model.id])
	facts.restricted("no-external-llm")
	_hosting == "external"
}

findings contains finding.new(
	evaluator, "model_hosting_unknown", "kcp.restrictions.no-external-llm", "DENY", [],
	"no-external-llm: the action does not say where its model is hosted (runtime.model.hosting)",
	{},
) if {
	facts.restricted("no-external-llm")
	not _hosting_given
}

findings contains finding.new(
	evaluator, "ai_training_forbidden", "kcp.restrictions.no-ai-training", "DENY", [],
	"no-ai-training: the unit may not be used for training",
	{"purpose": input.action.knowledge.purpose},
) if {
	facts.restricted("no-ai-training")
	lower(input.action.knowledge.purpose) in {"training", "ai_training", "model_training"}
}

findings contains finding.new(
	evaluator, "human_approval_required", "kcp.restrictions.human-approval-required", "HUMAN_APPROVAL",
	["independent_human_approval"],
	"a human approves before this unit is used",
	{"approval_mechanism": facts.unit.delegation.human_in_the_loop.approval_mechanism},
) if {
	_human_required
}

_human_required if facts.restricted("human-approval-required")

_human_required if facts.unit.delegation.human_in_the_loop.required == true
