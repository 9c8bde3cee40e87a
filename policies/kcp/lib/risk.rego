# METADATA
# title: Risk computed from facts
# description: |
#   The risk of an action from what the gate knows, never from what the agent says about
#   itself: HIGH for a high-value amount, a cross-border payment or a high-risk country, a first
#   payment to a beneficiary (the gate's history shows none before), a velocity rule exceeded;
#   MEDIUM for an amount at or above the currency's confirmation threshold, restricted data, a
#   special data category (health, biometric, genetic, special_category, criminal, children), a
#   new or modified beneficiary flag (attested or stated), a value transfer whose beneficiary history the gate did
#   not count; else LOW. A
#   stated runtime.risk_level can only raise it (an agent can make itself stricter, never laxer).
package kcp.lib.risk

import rego.v1

import data.kcp.evaluators.budget
import data.kcp.evaluators.financial
import data.kcp.lib.facts
import data.kcp.lib.trusted
import data.kcp.lib.visibility

_action := input.action

_order := {"LOW": 0, "MEDIUM": 1, "HIGH": 2, "CRITICAL": 3}

_levels := ["LOW", "MEDIUM", "HIGH", "CRITICAL"]

_stated := {"low": "LOW", "medium": "MEDIUM", "high": "HIGH", "critical": "CRITICAL"}

_special := {"health", "biometric", "genetic", "special_category", "criminal", "children"}

_money := data.kcp_data.matrix.parameters.money

# METADATA
# title: Risk factors
# description: Each fact that raises the risk, with the level it raises it to.
factors contains ["high_value", "HIGH"] if financial.high_value

factors contains ["cross_border", "HIGH"] if _action.action_type == "cross_border_payment"

factors contains ["high_risk_country", "HIGH"] if _action.attributes.high_risk_country == true

factors contains ["first_payment_to_beneficiary", "HIGH"] if {
	financial.value_transfer
	c := input.context.counters.beneficiary
	c.key == _beneficiary_key
	c.prior_payments == 0
}

# Once a decision (two rules read it; a call runs every body of budget.key).
_beneficiary_key := budget.key("beneficiary")

# Without the gate's history the first-payment fact is unknown: not low.
factors contains ["beneficiary_history_unknown", "MEDIUM"] if {
	financial.value_transfer
	not _history_known
}

_history_known if input.context.counters.beneficiary.key == _beneficiary_key

factors contains ["velocity_exceeded", "HIGH"] if count(budget.velocity_exceeded) > 0

factors contains ["restricted_data", "MEDIUM"] if visibility.sensitivity == "restricted"

factors contains ["special_data_category", "MEDIUM"] if {
	some category in facts.profile.compliance.data_categories
	category in _special
}

factors contains ["confirmation_amount", "MEDIUM"] if {
	financial.value_transfer
	_action.amount.value_minor >= _money.confirmation_minor[_action.amount.currency]
}

# Attested by the gate or stated by the action (kcp.lib.trusted): either raises it.
factors contains ["beneficiary_flag", "MEDIUM"] if {
	some flag in ["new_beneficiary", "modified_beneficiary"]
	trusted.candidates[flag][true] # trusted.raised, inline (no call per flag)
}

factors contains ["stated", level] if {
	level := _stated[_action.runtime.risk_level]
}

# METADATA
# title: The computed risk level
# description: The highest level any factor raises it to; LOW when none applies.
level := _levels[max({_order[f[1]] | some f in factors} | {0})] # kcp-opa: ordered alike (ranks 0-3)

# METADATA
# title: Low risk
default low := false

low if level == "LOW"
