# METADATA
# title: Routing states
# description: |
#   The routing states of the gate contract, strongest first, and how each maps to the
#   knowledge-bound outcome. Every finding names one state; the decision is the strongest.
package kcp.lib.routing

import rego.v1

# METADATA
# title: Routing states, strongest first
# description: DENY is terminal; ESCALATE and COMPLIANCE_REVIEW are holds no approval clears.
states := [
	"DENY",
	"COMPLIANCE_REVIEW",
	"ESCALATE",
	"HUMAN_APPROVAL",
	"IDENTITY_VERIFICATION",
	"STEP_UP_AUTHENTICATION",
	"USER_CONFIRMATION",
	"ALLOW",
]

# METADATA
# title: Strength of a state
# description: 7 for DENY down to 0 for ALLOW; undefined for an unknown state.
strength(state) := 7 - properties[state].rank

# METADATA
# title: Strongest state
# description: |
#   The strongest of a set of states; ALLOW for the empty set. States the table does not know
#   are ignored; if only such states are given, the result is undefined (the gate fails closed).
strongest(found) := states[min(ranks)] if { # kcp-opa: ordered alike (ranks 0-7)
	ranks := {properties[state].rank | some state in found}
	count(ranks) > 0
}

strongest(found) := "ALLOW" if count(found) == 0

# METADATA
# title: What each routing state means
# description: |
#   Its rank (0 = strongest, the position in `states`), its knowledge-bound outcome, and
#   whether it is a hold. One constant object: a lookup costs regopy a few microseconds where
#   a function with a body per state (and a set literal in each) cost tens.
properties := {
	"DENY": {"rank": 0, "outcome": "deny", "hold": true},
	"COMPLIANCE_REVIEW": {"rank": 1, "outcome": "escalate", "hold": true},
	"ESCALATE": {"rank": 2, "outcome": "escalate", "hold": true},
	"HUMAN_APPROVAL": {"rank": 3, "outcome": "require_approval", "hold": false},
	"IDENTITY_VERIFICATION": {"rank": 4, "outcome": "require_approval", "hold": false},
	"STEP_UP_AUTHENTICATION": {"rank": 5, "outcome": "require_approval", "hold": false},
	"USER_CONFIRMATION": {"rank": 6, "outcome": "require_approval", "hold": false},
	"ALLOW": {"rank": 7, "outcome": "allow", "hold": false},
}

# METADATA
# title: Knowledge-bound outcome
# description: allow, require_approval, escalate or deny for a routing state.
outcome(state) := properties[state].outcome

# METADATA
# title: Hold
# description: A state that ordinary approval cannot clear and that blocks any receipt.
hold(state) if properties[state].hold
