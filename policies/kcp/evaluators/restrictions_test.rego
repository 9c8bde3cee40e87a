package kcp.evaluators.restrictions_test

import rego.v1

import data.kcp.evaluators.restrictions

_units := {"depth": 0, "count": 3, "slots": {"p": {
	"llm": {"profile": 0},
	"hitl": {"profile": 1},
	"open": {"profile": 2},
}}}

_profiles := [
	{
		"compliance": {"restrictions": ["no-external-llm", "no-ai-training"]},
		"delegation": {"human_in_the_loop": {"required": false}},
	},
	{
		"compliance": {"restrictions": []},
		"delegation": {"human_in_the_loop": {"required": true, "approval_mechanism": "oauth_consent"}},
	},
	{"compliance": {"restrictions": []}, "delegation": {"human_in_the_loop": {"required": false}}},
]

test_external_model_denied if {
	units := _units
	profiles := _profiles
	codes := {f.code | some f in restrictions.findings} with input.action.knowledge as {"project": "p", "unit": "llm"}
		with input.context.facts as {"model_id": {"value": "gpt"}, "model_hosting": {"value": "external"}}
		with data.kcp_data.units as units with data.kcp_data.profiles as profiles
	codes == {"external_llm_forbidden"}
}

test_self_hosted_model_passes if {
	units := _units
	profiles := _profiles
	count(restrictions.findings) == 0 with input.action.knowledge as {"project": "p", "unit": "llm"}
		with input.context.facts as {"model_id": {"value": "local"}, "model_hosting": {"value": "self_hosted"}}
		with data.kcp_data.units as units with data.kcp_data.profiles as profiles
}

test_unknown_hosting_denied if {
	units := _units
	profiles := _profiles
	codes := {f.code | some f in restrictions.findings} with input.action.knowledge as {"project": "p", "unit": "llm"}
		with data.kcp_data.units as units with data.kcp_data.profiles as profiles
	codes == {"model_hosting_unknown"}
}

test_training_purpose_denied if {
	units := _units
	profiles := _profiles
	codes := {f.code | some f in restrictions.findings}
		with input.action.knowledge as {"project": "p", "unit": "llm", "purpose": "TRAİNING"}
		with input.context.folded as {"purpose": "training"}
		with input.context.facts as {"model_id": {"value": "local"}, "model_hosting": {"value": "self_hosted"}}
		with data.kcp_data.units as units with data.kcp_data.profiles as profiles
	codes == {"ai_training_forbidden"}
}

# Never lower() on the raw purpose: only the fold decides (regopy's lower is ASCII-only).
test_raw_purpose_case_is_not_compared if {
	units := _units
	profiles := _profiles
	codes := {f.code | some f in restrictions.findings}
		with input.action.knowledge as {"project": "p", "unit": "llm", "purpose": "support"}
		with input.context.folded as {"purpose": "support"}
		with input.context.facts as {"model_id": {"value": "local"}, "model_hosting": {"value": "self_hosted"}}
		with data.kcp_data.units as units with data.kcp_data.profiles as profiles
	codes == set()
}

test_purpose_without_fold_denied if {
	units := _units
	profiles := _profiles
	codes := {f.code | some f in restrictions.findings}
		with input.action.knowledge as {"project": "p", "unit": "llm", "purpose": "Training"}
		with input.context.facts as {"model_id": {"value": "local"}, "model_hosting": {"value": "self_hosted"}}
		with data.kcp_data.units as units with data.kcp_data.profiles as profiles
	codes == {"purpose_not_folded"}
}

test_human_in_the_loop_requires_independent_approval if {
	units := _units
	profiles := _profiles
	some f in restrictions.findings with input.action.knowledge as {"project": "p", "unit": "hitl"}
		with data.kcp_data.units as units with data.kcp_data.profiles as profiles
	f.state == "HUMAN_APPROVAL"
	f.controls == ["independent_human_approval"]
	f.details.approval_mechanism == "oauth_consent"
}

test_unrestricted_unit_has_no_findings if {
	units := _units
	profiles := _profiles
	count(restrictions.findings) == 0 with input.action.knowledge as {"project": "p", "unit": "open"}
		with data.kcp_data.units as units with data.kcp_data.profiles as profiles
}

test_external_model_without_id_is_still_denied if {
	profiles := [{"compliance": {"restrictions": ["no-external-llm"]}}]
	units := {"depth": 0, "count": 1, "slots": {"p": {"u": {"profile": 0}}}}
	found := restrictions.findings with input.action.knowledge as {"project": "p", "unit": "u"}
		with input.context.facts as {"model_hosting": {"value": "external"}}
		with data.kcp_data.units as units with data.kcp_data.profiles as profiles
	some f in found
	f.code == "external_llm_forbidden"
}

# Training is refused only where the unit declares no-ai-training ("open" declares nothing).
test_training_purpose_on_an_unrestricted_unit_passes if {
	units := _units
	profiles := _profiles
	codes := {f.code | some f in restrictions.findings}
		with input.action.knowledge as {"project": "p", "unit": "open", "purpose": "training"}
		with input.context.folded as {"purpose": "training"}
		with data.kcp_data.units as units with data.kcp_data.profiles as profiles
	codes == set()
}
