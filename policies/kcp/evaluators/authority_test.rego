package kcp.evaluators.authority_test

import rego.v1

import data.kcp.evaluators.authority

_units := {"depth": 0, "count": 3, "slots": {"p": {
	"declared": {"profile": 0},
	"bare": {"profile": 1},
	"legacy": {"profile": 2},
}}}

_profiles := [
	{
		"authority": {
			"declared": true,
			"actions": {
				"read": "initiative",
				"summarize": "initiative",
				"modify": "denied",
				"share_externally": "requires_approval",
				"execute": "denied",
				"export_to_pdf": "requires_approval",
			},
		},
		"delegation": {"human_in_the_loop": {"required": false, "approval_mechanism": "oauth_consent"}},
	},
	{
		"authority": {
			"declared": false,
			"actions": {
				"read": "initiative",
				"summarize": "initiative",
				"modify": "denied",
				"share_externally": "denied",
				"execute": "denied",
			},
		},
	},
	{"compliance": {}},
]

_matrix := {
	"kcp_actions": {
		"read": "read",
		"modify": "modify",
		"share": "share_externally",
		"export": "export_to_pdf",
		"print": "print_copy",
	},
}

_findings(unit, task) := fs if {
	units := _units
	profiles := _profiles
	matrix := _matrix
	fs := authority.findings with input.action as {"action_type": task, "knowledge": {"project": "p", "unit": unit}}
		with data.kcp_data.units as units with data.kcp_data.profiles as profiles with data.kcp_data.matrix as matrix
}

test_initiative_has_no_finding if {
	count(_findings("declared", "read")) == 0
}

test_denied_action_denies if {
	{[f.code, f.state] | some f in _findings("declared", "modify")} == {["authority_denied", "DENY"]}
}

test_requires_approval_names_the_mechanism if {
	fs := _findings("declared", "share")
	{[f.code, f.state] | some f in fs} == {["authority_requires_approval", "HUMAN_APPROVAL"]}
	{f.details.approval_mechanism | some f in fs} == {"oauth_consent"}
	{c | some f in fs; some c in f.controls} == {"independent_human_approval"}
}

test_declared_custom_action_follows_its_value if {
	{f.code | some f in _findings("declared", "export")} == {"authority_requires_approval"}
}

test_undeclared_custom_action_is_denied if {
	{[f.code, f.rule] | some f in _findings("declared", "print")} == {["authority_denied", "kcp.authority.custom"]}
}

test_no_block_denies_modify_by_default if {
	{f.code | some f in _findings("bare", "modify")} == {"authority_denied"}
	count(_findings("bare", "read")) == 0
}

test_unmapped_task_on_declared_unit_escalates if {
	{[f.code, f.state] | some f in _findings("declared", "refund")} == {["authority_unmapped", "ESCALATE"]}
}

test_unmapped_task_on_bare_unit_is_not_an_authority_matter if {
	count(_findings("bare", "refund")) == 0
}

test_profile_without_authority_gets_safe_defaults if {
	{f.code | some f in _findings("legacy", "modify")} == {"authority_denied"}
	{f.details.approval_mechanism | some f in _findings("legacy", "share")} == set()
	{f.code | some f in _findings("legacy", "share")} == {"authority_denied"}
}

test_requires_approval_without_mechanism_says_so if {
	units := {"depth": 0, "count": 1, "slots": {"p": {"u": {"profile": 0}}}}
	profiles := [{"authority": {"declared": true, "actions": {"modify": "requires_approval"}}}]
	matrix := _matrix
	fs := authority.findings with input.action as {"action_type": "modify", "knowledge": {"project": "p", "unit": "u"}}
		with data.kcp_data.units as units with data.kcp_data.profiles as profiles with data.kcp_data.matrix as matrix
	{f.details.approval_mechanism | some f in fs} == {"not declared"}
}

test_unknown_unit_has_no_authority_finding if {
	count(_findings("nope", "modify")) == 0
}
