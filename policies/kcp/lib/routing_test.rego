package kcp.lib.routing_test

import rego.v1

import data.kcp.lib.routing

test_strongest_wins if {
	routing.strongest({"USER_CONFIRMATION", "HUMAN_APPROVAL", "ALLOW"}) == "HUMAN_APPROVAL"
	routing.strongest({"ESCALATE", "DENY"}) == "DENY"
	routing.strongest({"COMPLIANCE_REVIEW", "ESCALATE"}) == "COMPLIANCE_REVIEW"
}

test_nothing_found_is_allow if {
	routing.strongest(set()) == "ALLOW"
}

test_unknown_state_is_ignored_not_allowed if {
	routing.strongest({"MAYBE", "USER_CONFIRMATION"}) == "USER_CONFIRMATION"
	not routing.strength("MAYBE")
}

test_strength_order if {
	routing.strength("DENY") == 7
	routing.strength("ALLOW") == 0
	routing.strength("ESCALATE") > routing.strength("HUMAN_APPROVAL")
}

test_outcomes if {
	routing.outcome("ALLOW") == "allow"
	routing.outcome("USER_CONFIRMATION") == "require_approval"
	routing.outcome("HUMAN_APPROVAL") == "require_approval"
	routing.outcome("ESCALATE") == "escalate"
	routing.outcome("COMPLIANCE_REVIEW") == "escalate"
	routing.outcome("DENY") == "deny"
}

test_holds if {
	routing.hold("DENY")
	routing.hold("ESCALATE")
	routing.hold("COMPLIANCE_REVIEW")
	not routing.hold("HUMAN_APPROVAL")
	not routing.hold("ALLOW")
}

test_properties_agree_with_the_order if {
	count(routing.properties) == count(routing.states)
	every i, state in routing.states {
		routing.properties[state].rank == i
	}
}

test_unknown_state_has_no_outcome if {
	not routing.outcome("MAYBE")
	not routing.hold("MAYBE")
}
