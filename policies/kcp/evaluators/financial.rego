# METADATA
# title: Financial (KYA) control triggers
# description: |
#   Each trigger adds its controls; they accumulate across rules. Thresholds are data
#   (matrix parameters.money, minor units per currency). A currency without a threshold
#   counts as high value, and a money-moving action without an amount is denied.
#   kcp-opa rule: a high-value transfer also requires identity and authority verification
#   (an agent's scope alone does not prove authority for it). Where the matrix lists its
#   money-moving task types, only those are value transfers and an amount on any other action
#   is denied; it may set the controls of value_transfer and high_value per task type
#   (parameters.money_controls_by_task_type, docs/budgets.md). The agent's scope and the
#   beneficiary and screening flags are the gate's (input.context.facts, kcp.lib.trusted): a
#   statement can only narrow the scope or raise a flag.
# custom:
#   evaluator_id: kya_controls
#   evaluator_version: "1.0.0"
package kcp.evaluators.financial

import rego.v1

import data.kcp.lib.facts
import data.kcp.lib.routing
import data.kcp.lib.trusted

_action := input.action

_attributes := input.action.attributes

_money := data.kcp_data.matrix.parameters.money

_money_moving := facts.money_moving

# Every attribute flag a trigger reads. Kept beside the triggers: a flag read below and not
# listed here never fires (financial_test.rego checks each).
_trigger_flags := {
	"irreversible", "material_irreversible",
	"new_device", "geo_anomaly", "stale_session", "sensitive_access",
	"stale_kyc", "identity_anomaly", "off_ramp", "account_control_change",
	"new_beneficiary", "modified_beneficiary",
	"screening_uncertain", "provider_conflict", "audit_failure",
}

# The trigger flags the action raises (value true). Each known flag is looked up in the
# action's attributes, never the other way round: iterating an action's attributes into a set
# cost regopy quadratic time in the number of true flags (4,000 flags: seconds; OPA ~10 ms),
# where a lookup per known flag costs the same for any attributes object.
_raised contains name if {
	is_object(_attributes) # an action without attributes tries no flag
	some name in _trigger_flags
	_attributes[name] == true
}

# An attested flag the gate holds raises its trigger whatever the action says. The lookup
# trusted.raised names, inline: a function call per flag cost regopy more than the lookup.
_raised contains name if {
	some name in ["new_beneficiary", "modified_beneficiary", "screening_uncertain"]
	trusted.candidates[name][true]
}

# METADATA
# title: Value transfer
default value_transfer := false

value_transfer if facts.value_transfer

default _amount_given := false

_amount_given if is_number(_action.amount.value_minor)

# Any amount at all (an object, a number, even `false`): where the matrix lists its money-moving
# task types, an action of another type that states one is denied, whatever its shape.
default _amount_stated := false

_amount_stated if _action.amount != null

default _money_type := false

_money_type if _action.action_type in _money_moving

_type_label := _action.action_type if is_string(_action.action_type)

_type_label := "(no action_type)" if not _type_label_given

_type_label_given if is_string(_action.action_type)

# The state and controls of the two threshold findings: the defaults, replaced by what the matrix
# sets for this task type (parameters.money_controls_by_task_type). `none` is a declared "no
# control" (the finding stays, as an ALLOW reason); a list routes to the strongest state of its
# controls, never a hold. Anything else (an empty list, which compile refuses) keeps the defaults.
_defaults := {
	"value_transfer": {"state": "USER_CONFIRMATION", "controls": ["user_confirmation"]},
	"high_value": {
		"state": "HUMAN_APPROVAL",
		"controls": ["authority_verification", "identity_verification", "independent_human_approval"],
	},
}

_transfer := object.union(_defaults.value_transfer, _route("value_transfer"))

_high := object.union(_defaults.high_value, _route("high_value"))

_for_type := declared if {
	declared := data.kcp_data.matrix.parameters.money_controls_by_task_type[_action.action_type]
	is_object(declared)
} else := {}

_route(kind) := {"state": "ALLOW", "controls": []} if {
	_for_type[kind] == "none"
} else := {"state": state, "controls": controls} if {
	controls := _for_type[kind]
	is_array(controls)
	count(controls) > 0
	state := routing.strongest({s | some c in controls; s := object.get(_control_state, c, "HUMAN_APPROVAL")})
} else := {}

# A control's routing state in a declared set: the user's own checks keep theirs; every other
# control (an approval, a verification, a review) is HUMAN_APPROVAL, so a threshold never holds.
_control_state := {
	"user_confirmation": "USER_CONFIRMATION",
	"step_up_authentication": "STEP_UP_AUTHENTICATION",
	"identity_verification": "IDENTITY_VERIFICATION",
}

_transfer_message := concat("", ["value transfer: the matrix sets no control for task type ", _type_label]) if {
	_for_type.value_transfer == "none"
} else := concat("", [
	"value transfer: the matrix sets the controls for task type ", _type_label, ": ",
	concat(", ", _for_type.value_transfer),
]) if {
	_transfer.controls == _for_type.value_transfer
} else := "value transfer: the user confirms"

# METADATA
# title: High value
# description: At or above the currency's high_value_minor threshold, or no threshold for it.
default high_value := false

high_value if {
	value_transfer
	_action.amount.value_minor >= _money.high_value_minor[_action.amount.currency]
}

high_value if {
	value_transfer
	_amount_given
	not _money.high_value_minor[_action.amount.currency]
}

# METADATA
# title: Risk floor
# description: A high-value transfer is at least HIGH risk, any value transfer at least MEDIUM.
risk_floor contains "HIGH" if high_value

risk_floor contains "MEDIUM" if value_transfer

# METADATA
# title: Findings
# custom:
#   requires: [input.action.action_type]
#   absent: "amount_missing (this rule)"
findings contains finding if {
	_action.action_type in _money_moving
	not _amount_given
	finding := {
		"code": "amount_missing",
		"rule": "kya.amount_missing",
		"state": "DENY",
		"controls": [],
		"message": "a money-moving action must state amount.value_minor",
		"details": {},
	}
}

# METADATA
# custom:
#   requires: [input.action.action_type]
#   absent: "amount absent: value transfer by action type"
findings contains finding if {
	value_transfer
	finding := {
		"code": "value_transfer",
		"rule": "kya.value_transfer",
		"state": _transfer.state,
		"controls": _transfer.controls,
		"message": _transfer_message,
		"details": {},
	}
}

# METADATA
# custom:
#   requires: [input.action.action_type]
#   absent: "amount absent: nothing stated"
findings contains finding if {
	facts.money_moving_declared
	_amount_stated
	not _money_type
	text1 := concat("", [
		"task type ", _type_label,
		" moves no money (matrix parameters.money_moving_task_types): its action may state no amount",
	])
	finding := {
		"code": "amount_on_non_money_action",
		"rule": "kya.amount_on_non_money_action",
		"state": "DENY",
		"controls": [],
		"message": text1,
		"details": {},
	}
}

# METADATA
# custom:
#   requires: []
#   absent: "attributes absent: no trigger raised"
findings contains finding if {
	"irreversible" in _raised
	finding := {
		"code": "irreversible_consequence",
		"rule": "kya.irreversible_consequence",
		"state": "USER_CONFIRMATION",
		"controls": ["user_confirmation"],
		"message": "irreversible for the user: the user confirms",
		"details": {},
	}
}

# METADATA
# custom:
#   requires: [input.action.action_type]
#   absent: "amount or threshold absent: high value"
findings contains finding if {
	high_value
	text1 := concat(" ", [_money_label(_action.amount.value_minor), _currency_label, _high_value_clause])
	finding := {
		"code": "high_value",
		"rule": "kya.high_value",
		"state": _high.state,
		"controls": _high.controls,
		"message": text1,
		"details": {},
	}
}

# METADATA
# custom:
#   requires: []
#   absent: "attributes absent: no trigger raised"
findings contains finding if {
	some name in _raised
	name in {"new_device", "geo_anomaly", "stale_session", "sensitive_access"}
	finding := {
		"code": "step_up_required",
		"rule": "kya.step_up_required",
		"state": "STEP_UP_AUTHENTICATION",
		"controls": ["step_up_authentication"],
		"message": "new device, geo anomaly, stale session or sensitive access",
		"details": {},
	}
}

# METADATA
# custom:
#   requires: [input.action.action_type]
findings contains finding if {
	_identity_trigger
	finding := {
		"code": "identity_verification_required",
		"rule": "kya.identity_verification_required",
		"state": "IDENTITY_VERIFICATION",
		"controls": ["identity_verification"],
		"message": "stale KYC, identity anomaly, withdrawal, off-ramp or account-control change",
		"details": {},
	}
}

_identity_trigger if _action.action_type == "withdrawal"

_identity_trigger if {
	some name in _raised
	name in {"stale_kyc", "identity_anomaly", "off_ramp", "account_control_change"}
}

# METADATA
# custom:
#   requires: [input.action.action_type, input.action.requested_action]
#   facts: {agent_scope: gate}
#   absent: "agent_scope absent: empty scope"
findings contains finding if {
	value_transfer
	some scope in _scopes
	not _covers(scope)
	text1 := concat("", ["requested_action ", _requested_label, " is not in the agent's scope"])
	finding := {
		"code": "scope_does_not_cover_action",
		"rule": "kya.scope_does_not_cover_action",
		"state": "HUMAN_APPROVAL",
		"controls": ["authority_verification"],
		"message": text1,
		"details": {},
	}
}

# METADATA
# custom:
#   requires: []
#   facts: {new_beneficiary: attested, modified_beneficiary: attested}
#   absent: "attributes absent: no trigger raised"
findings contains finding if {
	some name in _raised
	name in {"new_beneficiary", "modified_beneficiary"}
	finding := {
		"code": "new_beneficiary",
		"rule": "kya.new_beneficiary",
		"state": "HUMAN_APPROVAL",
		"controls": ["beneficiary_verification", "independent_human_approval"],
		"message": "new or modified payout target",
		"details": {},
	}
}

# METADATA
# custom:
#   requires: [input.action.action_type]
findings contains finding if {
	_independent_trigger
	finding := {
		"code": "independent_approval_required",
		"rule": "kya.independent_approval_required",
		"state": "HUMAN_APPROVAL",
		"controls": ["independent_human_approval"],
		"message": "lending or a material irreversible action",
		"details": {},
	}
}

_independent_trigger if _action.action_type == "lending"

_independent_trigger if "material_irreversible" in _raised

# METADATA
# custom:
#   requires: []
#   facts: {screening_uncertain: attested}
#   absent: "attributes absent: no trigger raised"
findings contains finding if {
	some name in _raised
	name in {"screening_uncertain", "provider_conflict", "audit_failure"}
	finding := {
		"code": "compliance_review_required",
		"rule": "kya.compliance_review_required",
		"state": "COMPLIANCE_REVIEW",
		"controls": ["compliance_review", "safe_stop"],
		"message": "screening uncertainty, provider conflict or audit failure",
		"details": {},
	}
}

# Message parts are total (a default when the value is missing): a message built from an
# undefined value would make the whole finding undefined and drop a DENY (fail open). Messages
# use concat, never sprintf over strings (docs/engine-findings.md items 13 and 19).

# Amounts print in major units with the currency's ISO 4217 minor-unit digits (2 unless listed),
# built from the digits of format_int: no `%` or division (docs/engine-findings.md item 1), so
# the message is byte-identical on regopy and OPA.
_minor_digits := {
	"BIF": 0,
	"CLP": 0,
	"DJF": 0,
	"GNF": 0,
	"ISK": 0,
	"JPY": 0,
	"KMF": 0,
	"KRW": 0,
	"PYG": 0,
	"RWF": 0,
	"UGX": 0,
	"UYI": 0,
	"VND": 0,
	"VUV": 0,
	"XAF": 0,
	"XOF": 0,
	"XPF": 0,
	"BHD": 3,
	"IQD": 3,
	"JOD": 3,
	"KWD": 3,
	"LYD": 3,
	"OMR": 3,
	"TND": 3,
}

_digits := object.get(_minor_digits, _currency_label, 2)

_money_label(minor) := concat("", [_sign(minor), format_int(abs(minor), 10)]) if _digits == 0

_money_label(minor) := concat("", [
	_sign(minor),
	substring(padded, 0, n - _digits),
	".",
	substring(padded, n - _digits, _digits),
]) if {
	_digits > 0
	plain := format_int(abs(minor), 10)
	# kcp-opa: ordered alike (0 against an integer: the text orders as the value)
	padded := concat("", [substring("0000", 0, max([0, (_digits + 1) - count(plain)])), plain])
	n := count(padded)
}

_sign(minor) := "-" if minor < 0

_sign(minor) := "" if minor >= 0

_high_value_clause := concat(" ", [
	"is at or above the high-value threshold of",
	_money_label(threshold),
	_currency_label,
]) if {
	threshold := _money.high_value_minor[_action.amount.currency]
}

_high_value_clause := concat(" ", ["is high value: no high-value threshold is set for", _currency_label]) if {
	not _money.high_value_minor[_action.amount.currency]
}

_currency_label := _action.amount.currency if is_string(_action.amount.currency)

_currency_label := "(no currency)" if not _currency_label_given

_currency_label_given if is_string(_action.amount.currency)

# The gate's granted scope and a stated one: the action must be in each. Without the gate's scope
# the empty scope is always a candidate, so a stated scope never lifts the finding.
# `x in local` aborts regopy's planner under `with input as` (docs/engine-findings.md hazard 4).
_covers(scope) if scope[_] == _action.requested_action

_scopes := trusted.candidates.agent_scope if {
	"agent_scope" in trusted.established
} else := scopes if {
	scopes := {[]} | object.get(trusted.candidates, "agent_scope", set())
}

_requested_label := _action.requested_action if is_string(_action.requested_action)

_requested_label := "(no requested_action)" if not _requested_label_given

_requested_label_given if is_string(_action.requested_action)
