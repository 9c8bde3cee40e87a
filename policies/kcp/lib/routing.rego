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
strength(state) := 7 - position if states[position] == state

# METADATA
# title: Strongest state
# description: The strongest of a set of states; ALLOW for the empty set.
strongest(found) := states[best] if {
	positions := {position | state := states[position]; state in found}
	count(positions) > 0
	best := min(positions)
}

strongest(found) := "ALLOW" if count(found) == 0

# METADATA
# title: Knowledge-bound outcome
# description: allow, require_approval, escalate or deny for a routing state.
outcome(state) := "allow" if state == "ALLOW"

outcome(state) := "deny" if state == "DENY"

outcome(state) := "escalate" if state in {"ESCALATE", "COMPLIANCE_REVIEW"}

outcome(state) := "require_approval" if {
	state in {"HUMAN_APPROVAL", "IDENTITY_VERIFICATION", "STEP_UP_AUTHENTICATION", "USER_CONFIRMATION"}
}

# METADATA
# title: Hold
# description: A state that ordinary approval cannot clear and that blocks any receipt.
hold(state) if state in {"DENY", "ESCALATE", "COMPLIANCE_REVIEW"}
