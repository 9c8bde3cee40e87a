package kcp.gate.evaluators_test

import rego.v1

import data.kcp.gate

# The generated union (evaluators.rego) carries each evaluator's findings into the gate:
# a money-moving action without an amount is the financial evaluator's DENY, and the context
# evaluator's missing clock is there beside it.
test_the_union_carries_every_evaluators_findings if {
	action := {"action_type": "payment", "requested_action": "pay"}
	codes := {f.code | some f in gate.findings} with input.action as action
	"amount_missing" in codes
	"context_missing" in codes
}

# A finding names no evaluator; the union gives it the id and version of its package METADATA.
test_the_union_names_each_finding_by_its_evaluators_metadata if {
	action := {"action_type": "payment", "requested_action": "pay"}
	found := {[f.code, f.evaluator_id, f.evaluator_version] | some f in gate.findings} with input.action as action
	["amount_missing", "kya_controls", "1.0.0"] in found
	["context_missing", "context_check", "1.0.0"] in found
}
