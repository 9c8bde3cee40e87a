# METADATA
# title: Financial (KYA) control triggers
# description: |
#   Each trigger adds its controls; they accumulate across rules. Thresholds are data
#   (matrix parameters.money, minor units per currency). A currency without a threshold
#   counts as high value, and a money-moving action without an amount is denied.
#   kcp-opa rule: a high-value transfer also requires identity and authority verification
#   (an agent's scope alone does not prove authority for it).
# custom:
#   evaluator_id: kya_controls
#   evaluator_version: "1.0.0"
package kcp.evaluators.financial

import rego.v1

import data.kcp.evaluators.finding

evaluator := {"id": "kya_controls", "version": "1.0.0"}

_action := input.action

_attributes := object.get(input.action, "attributes", {})

_money := data.kcp_data.matrix.parameters.money

_money_moving := {"payment", "cross_border_payment", "withdrawal", "refund", "transfer", "payout", "lending"}

_flag(name) if _attributes[name] == true

_kya(code, state, controls, message) := finding.new(evaluator, code, concat("", ["kya.", code]), state, controls, message, {})

# METADATA
# title: Value transfer
value_transfer if _action.action_type in _money_moving

value_transfer if _action.amount.value_minor > 0

_amount_given if is_number(_action.amount.value_minor)

# METADATA
# title: High value
# description: At or above the currency's high_value_minor threshold, or no threshold for it.
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
# title: Findings
findings contains _kya("amount_missing", "DENY", [], "a money-moving action must state amount.value_minor") if {
	_action.action_type in _money_moving
	not _amount_given
}

findings contains _kya("value_transfer", "USER_CONFIRMATION", ["user_confirmation"], "value transfer: the user confirms") if {
	value_transfer
}

findings contains _kya("irreversible_consequence", "USER_CONFIRMATION", ["user_confirmation"], "irreversible for the user: the user confirms") if {
	_flag("irreversible")
}

findings contains _kya(
	"high_value", "HUMAN_APPROVAL",
	["independent_human_approval", "identity_verification", "authority_verification"],
	text1,
) if {
	text1 := sprintf("%v %v is at or above the high-value threshold", [_action.amount.value_minor, _action.amount.currency])
	high_value
}

findings contains _kya("step_up_required", "STEP_UP_AUTHENTICATION", ["step_up_authentication"], "new device, geo anomaly, stale session or sensitive access") if {
	some name in ["new_device", "geo_anomaly", "stale_session", "sensitive_access"]
	_flag(name)
}

findings contains _kya("identity_verification_required", "IDENTITY_VERIFICATION", ["identity_verification"], "stale KYC, identity anomaly, withdrawal, off-ramp or account-control change") if {
	_identity_trigger
}

_identity_trigger if _action.action_type == "withdrawal"

_identity_trigger if {
	some name in ["stale_kyc", "identity_anomaly", "off_ramp", "account_control_change"]
	_flag(name)
}

findings contains _kya("scope_does_not_cover_action", "HUMAN_APPROVAL", ["authority_verification"], text1) if {
	text1 := sprintf("requested_action %v is not in the agent's scope", [_action.requested_action])
	value_transfer
	not _action.requested_action in object.get(_action, ["authorization_context", "agent_scope"], [])
}

findings contains _kya("new_beneficiary", "HUMAN_APPROVAL", ["beneficiary_verification", "independent_human_approval"], "new or modified payout target") if {
	some name in ["new_beneficiary", "modified_beneficiary"]
	_flag(name)
}

findings contains _kya("independent_approval_required", "HUMAN_APPROVAL", ["independent_human_approval"], "lending or a material irreversible action") if {
	_independent_trigger
}

_independent_trigger if _action.action_type == "lending"

_independent_trigger if _flag("material_irreversible")

findings contains _kya("compliance_review_required", "COMPLIANCE_REVIEW", ["compliance_review", "safe_stop"], "screening uncertainty, provider conflict or audit failure") if {
	some name in ["screening_uncertain", "provider_conflict", "audit_failure"]
	_flag(name)
}
