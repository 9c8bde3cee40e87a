package kcp.lib.trusted_test

import rego.v1

import data.kcp.lib.trusted

_gate(value) := {"value": value, "class": "gate", "source": "config:test"}

test_the_gates_value_is_a_candidate_and_established if {
	facts := {"deployment_region": _gate("US")}
	trusted.candidates.deployment_region == {"US"} with input.context.facts as facts
	trusted.established == {"deployment_region"} with input.context.facts as facts
	count(trusted.conflicts) == 0 with input.context.facts as facts
}

test_a_differing_statement_is_a_conflict_and_a_candidate_never_established if {
	facts := {"deployment_region": _gate("US")}
	runtime := {"deployment_region": "EU"}
	trusted.candidates.deployment_region == {"US", "EU"}
		with input.context.facts as facts
		with input.action.runtime as runtime
	trusted.conflicts == {{"fact": "deployment_region", "gate": "US", "stated": "EU"}} with input.context.facts as facts
		with input.action.runtime as runtime
}

test_a_statement_alone_is_never_established if {
	runtime := {"deployment_region": "EU", "evidence_status": "present"}
	trusted.established == set() with input.context.facts as {} with input.action.runtime as runtime
	trusted.candidates.deployment_region == {"EU"} with input.context.facts as {} with input.action.runtime as runtime
}

test_scopes_in_another_order_are_no_conflict if {
	facts := {"agent_scope": _gate(["a", "b"])}
	count(trusted.conflicts) == 0 with input.context.facts as facts
		with input.action.authorization_context as {"agent_scope": ["b", "a"]}
}

# The three conflict rules: a list against an unsorted gate list, lists of other lengths or
# elements, a list against a non-list either way.
test_scopes_compare_as_sets_whichever_side_is_sorted if {
	facts := {"agent_scope": _gate(["b", "a", "c"])}
	count(trusted.conflicts) == 0 with input.context.facts as facts
		with input.action.authorization_context as {"agent_scope": ["c", "b", "a"]}
	count(trusted.conflicts) == 1 with input.context.facts as facts
		with input.action.authorization_context as {"agent_scope": ["c", "b", "a", "a"]}
	count(trusted.conflicts) == 1 with input.context.facts as facts
		with input.action.authorization_context as {"agent_scope": ["c", "b", "d"]}
	count(trusted.conflicts) == 1 with input.context.facts as facts
		with input.action.authorization_context as {"agent_scope": "a"}
	count(trusted.conflicts) == 1 with input.context.facts as {"agent_scope": _gate("a")}
		with input.action.authorization_context as {"agent_scope": ["a"]}
}

test_a_false_flag_is_established_and_a_stated_true_raises_it if {
	facts := {"new_beneficiary": _gate(false)}
	trusted.established == {"new_beneficiary"} with input.context.facts as facts
	not trusted.raised("new_beneficiary") with input.context.facts as facts
	trusted.raised("new_beneficiary")
		with input.context.facts as facts
		with input.action.attributes as {"new_beneficiary": true}
}

test_a_true_flag_of_the_gate_is_raised_whatever_the_action_says if {
	facts := {"new_beneficiary": _gate(true)}
	trusted.raised("new_beneficiary")
		with input.context.facts as facts
		with input.action.attributes as {"new_beneficiary": false}
}

test_an_expired_attestation_establishes_nothing if {
	entry := {"value": "present", "class": "attested", "source": "attestation:x/k", "expires_epoch_seconds": 100}
	trusted.established == set() with input.context.facts as {"evidence_status": entry}
		with input.context.decision_epoch_seconds as 100
	trusted.established == {"evidence_status"} with input.context.facts as {"evidence_status": entry}
		with input.context.decision_epoch_seconds as 99
}

test_a_fact_of_no_known_name_is_ignored if {
	trusted.established == set() with input.context.facts as {"budget_state": _gate("within_budget")}
}

# `stated` has one rule per fact: each reads the path stated_paths names, and every fact has one.
test_stated_reads_every_path_of_stated_paths if {
	action := {
		"runtime": {
			"deployment_region": "r",
			"environment": "e",
			"model": {"id": "m", "hosting": "h"},
			"evidence_status": "s",
		},
		"authorization_context": {"actor_role": "a", "agent_scope": ["x"]},
		"attributes": {"new_beneficiary": true, "modified_beneficiary": false, "screening_uncertain": true},
	}
	got := trusted.stated with input.action as action
	count(got) == count(trusted.stated_paths)
	every name, path in trusted.stated_paths {
		got[name] == object.get(action, path, null)
	}
}

test_a_gate_fact_without_a_value_establishes_nothing if {
	trusted.established == set() with input.context.facts as {"deployment_region": {"class": "gate"}}
	trusted.established == set() with input.context.facts as {"deployment_region": "EU"}
}

# The context stage's "unset" marker ({"kcp_opa": "unset"}) at any stated path states nothing.
test_the_unset_marker_states_nothing_at_any_path if {
	unset := {"kcp_opa": "unset"}
	action := {
		"runtime": {
			"deployment_region": unset,
			"environment": unset,
			"model": {"id": unset, "hosting": unset},
			"evidence_status": unset,
		},
		"authorization_context": {"actor_role": unset, "agent_scope": unset},
		"attributes": {"new_beneficiary": unset, "modified_beneficiary": unset, "screening_uncertain": unset},
	}
	trusted.stated == {} with input.action as action
	trusted.candidates == {} with input.action as action with input.context.facts as {}
}

test_a_statement_equal_to_the_gates_value_is_no_conflict if {
	facts := {"deployment_region": _gate("US"), "new_beneficiary": _gate(false)}
	trusted.conflicts == set() with input.context.facts as facts
		with input.action.runtime as {"deployment_region": "US"}
		with input.action.attributes as {"new_beneficiary": false}
}

test_an_attestation_with_an_expiry_that_is_not_a_number_never_expires if {
	entry := {"value": "present", "class": "attested", "source": "attestation:x/k", "expires_epoch_seconds": null}
	trusted.established == {"evidence_status"} with input.context.facts as {"evidence_status": entry}
		with input.context.decision_epoch_seconds as 100
}
