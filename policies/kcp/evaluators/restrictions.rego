# METADATA
# title: KCP restrictions
# description: |
#   no-external-llm, no-ai-training and human-approval-required (or the delegation block's
#   human_in_the_loop.required). The model's hosting is the gate's (the trust registry's entry
#   for the agent, kcp.lib.trusted); a stated hosting is checked too. A restriction the gate
#   cannot check (no registered hosting under no-external-llm) denies: missing context never allows.
# custom:
#   evaluator_id: restriction_check
#   evaluator_version: "1.0.0"
package kcp.evaluators.restrictions

import rego.v1

import data.kcp.lib.facts
import data.kcp.lib.trusted

_hosting := object.get(trusted.candidates, "model_hosting", set())

_hosting_given if "model_hosting" in trusted.established

# METADATA
# title: Findings
# custom:
#   requires: [input.action.knowledge.unit]
#   facts: {model_hosting: gate, model_id: gate}
#   absent: "hosting absent: model_hosting_unknown"
#   waivable: [external_llm_forbidden]
findings contains finding if {
	facts.restricted("no-external-llm")
	"external" in _hosting
	text1 := concat("", ["no-external-llm: model ", _model_label, " is externally hosted"])
	finding := {
		"code": "external_llm_forbidden",
		"rule": "kcp.restrictions.no-external-llm",
		"state": "DENY",
		"controls": [],
		"message": text1,
		"details": {"model": _model_label, "hosting": "external"},
	}
}

# METADATA
# custom:
#   requires: [input.action.knowledge.unit]
#   facts: {model_hosting: gate}
#   absent: "model_hosting_unknown (this rule)"
findings contains finding if {
	facts.restricted("no-external-llm")
	not _hosting_given
	finding := {
		"code": "model_hosting_unknown",
		"rule": "kcp.restrictions.no-external-llm",
		"state": "DENY",
		"controls": [],
		"message": concat("", [
			"no-external-llm: the gate does not know where the agent's model is hosted ",
			"(input.context.facts.model_hosting)",
		]),
		"details": {},
	}
}

# The purpose is compared through its fold, built in Python (NFKD, casefold, marks and format
# characters dropped, NFC) and archived in input.context.folded: regopy's lower() is ASCII-only,
# so lower("TRAİNING") passed on regopy and failed on OPA (docs/engine-findings.md item 26).
_purpose_given if is_string(input.action.knowledge.purpose)

_fold_given if is_string(input.context.folded.purpose)

# METADATA
# custom:
#   requires: [input.action.knowledge.unit]
#   absent: "purpose absent: not a training use"
findings contains finding if {
	facts.restricted("no-ai-training")
	input.context.folded.purpose in {"training", "ai_training", "model_training"}
	finding := {
		"code": "ai_training_forbidden",
		"rule": "kcp.restrictions.no-ai-training",
		"state": "DENY",
		"controls": [],
		"message": "no-ai-training: the unit may not be used for training",
		"details": {"purpose": input.action.knowledge.purpose},
	}
}

# METADATA
# custom:
#   requires: [input.action.knowledge.unit]
#   absent: "purpose absent: nothing to fold"
findings contains finding if {
	facts.restricted("no-ai-training")
	_purpose_given
	not _fold_given
	finding := {
		"code": "purpose_not_folded",
		"rule": "kcp.restrictions.no-ai-training",
		"state": "DENY",
		"controls": [],
		"message": concat("", [
			"no-ai-training: the purpose cannot be checked without its folded form in input.context.folded, which the gate ",
			"builds",
		]),
		"details": {},
	}
}

# METADATA
# custom:
#   requires: [input.action.knowledge.unit]
findings contains finding if {
	_human_required
	finding := {
		"code": "human_approval_required",
		"rule": "kcp.restrictions.human-approval-required",
		"state": "HUMAN_APPROVAL",
		"controls": ["independent_human_approval"],
		"message": "a human approves before this unit is used",
		"details": {"approval_mechanism": facts.profile.delegation.human_in_the_loop.approval_mechanism},
	}
}

default _human_required := false

_human_required if facts.restricted("human-approval-required")

_human_required if facts.profile.delegation.human_in_the_loop.required == true

# Message parts are total (a default when the value is missing): a message built from an
# undefined value would make the whole finding undefined and drop a DENY (fail open). Messages
# use concat, never sprintf over strings (docs/engine-findings.md items 13 and 19).

_model_label := trusted.gate.model_id if is_string(trusted.gate.model_id)

_model_label := "(no model id)" if not _model_label_given

_model_label_given if is_string(trusted.gate.model_id)

# METADATA
# title: Applies (the decision plan, compile time)
# description: |
#   Whether this evaluator can find anything (or owe an obligation) for a unit of `profile` and an
#   action of type `task`, from declarations alone. `kcp-opa compile` evaluates it over every
#   profile and every action type the matrix names into the bundle's decision plan; a decision
#   reaches this evaluator only when its plan row names it (kcp.gate.planned). It may
#   over-approximate (a needless visit costs time) but never miss (a miss skips a finding). It
#   reads only its arguments and data.kcp_data, never input. docs/extending.md.
applies(profile, _) if {
	some name in ["no-external-llm", "no-ai-training", "human-approval-required"]
	name in profile.compliance.restrictions
}

applies(profile, _) if profile.delegation.human_in_the_loop.required == true
