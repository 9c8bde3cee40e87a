# METADATA
# title: Budgets, velocity and rate limits over the gate's own history
# description: |
#   The gate counts its own history (decisions and receipts it recorded) and puts the counts in
#   input.context.counters (class gate, docs/budgets.md); the limits are matrix data
#   (parameters.budgets, parameters.velocity, parameters.rate_limits) and the unit's KCP
#   rate_limits. A budget applies to an action of its task types whose amount is in the
#   budget's currency (or that moves no money): spent + reserved + this amount above
#   limit_minor is ESCALATE `budget_exhausted`, above approval_threshold_minor HUMAN_APPROVAL
#   `budget_approval_required`. A value transfer that takes a velocity rule's count or sum past
#   its threshold gets the rule's outcome (`velocity_exceeded`); a request past a unit's rate
#   limit in its window the matrix's outcome (`rate_limited`). Counts the gate did not supply,
#   or counted for another key, are ESCALATE `context_missing`: a stated budget_state never
#   stands in for them (it can only add its own, stricter finding in runtime_rules). Spend the
#   gate cannot see comes as attested spend (input.context.metering, class attested, signed by
#   a metering issuer) and is added to the budget's total; a stale, refused or unsummable one
#   is never counted and holds its budget ESCALATE `context_missing`.
# custom:
#   evaluator_id: budget_check
#   evaluator_version: "1.0.0"
package kcp.evaluators.budget

import rego.v1

import data.kcp.evaluators.financial
import data.kcp.lib.facts
import data.kcp.lib.metering

_action := input.action

_params := data.kcp_data.matrix.parameters

_counters := object.get(input, ["context", "counters"], {})

_amount := _action.amount.value_minor if is_number(_action.amount.value_minor) else := 0

_currency := _action.amount.currency if is_string(_action.amount.currency) else := ""

_outcome := {
	"DENY": {"state": "DENY", "controls": []},
	"ESCALATE": {"state": "ESCALATE", "controls": []},
	"HUMAN_APPROVAL": {"state": "HUMAN_APPROVAL", "controls": ["independent_human_approval"]},
}

_approver := role if {
	role := _params.approver_roles.by_task_type[_action.action_type]
} else := _params.approver_roles.default

# METADATA
# title: The key a budget or velocity rule counts under for this action
key(per) := _action.tenant_id if per == "tenant"

key(per) := _action.agent_id if per == "agent"

key(per) := _action.action_type if per == "task_type"

key(per) := concat("/", [_action.tenant_id, beneficiary]) if per == "beneficiary"

# METADATA
# title: The beneficiary a value transfer pays (account fingerprint, else reference)
beneficiary := _action.target.account_fingerprint if {
	is_string(_action.target.account_fingerprint)
} else := _action.target.reference if {
	is_string(_action.target.reference)
}

default _moves_money := false

_moves_money if is_number(_action.amount.value_minor)

_spends(b) if b.task_types == "all"

_spends(b) if _action.action_type in b.task_types

# METADATA
# title: The budgets that apply to this action
applicable contains b if {
	some b in object.get(_params, "budgets", [])
	_spends(b)
	_in_currency(b)
}

_in_currency(b) if not _moves_money

_in_currency(b) if b.currency == _currency

# Counts for a declared rule, only when counted under this action's key.
_count(kind, rule) := c if {
	c := _counters[kind][rule.id]
	is_string(c.key)
	c.key == key(rule.per)
}

# METADATA
# title: Budget totals
# description: spent (committed) + reserved (receipts issued, not expired) + attested spend + this action's amount.
total(b) := ((c.spent_minor + c.reserved_minor) + metering.spent(b, key(b.per))) + _amount if {
	c := _count("budgets", b)
	is_number(c.spent_minor)
	is_number(c.reserved_minor)
}

# Budgets whose attested spend cannot be established: never counted, context_missing below.
metering_unusable contains b.id if {
	some b in applicable
	metering.unusable(b, key(b.per))
}

_exhausted(b) if total(b) > b.limit_minor

# A budget already at its limit is exhausted for an action that moves no money too.
_exhausted(b) if {
	_amount == 0
	total(b) >= b.limit_minor
}

# METADATA
# title: Findings
# description: ESCALATE budget_exhausted when this action would take the budget past its limit.
# custom:
#   requires: [input.context.counters.budgets]
#   facts: {metered_spend: attested}
#   absent: "counts absent: context_missing (this evaluator)"
findings contains finding if {
	some b in applicable
	_exhausted(b)
	text1 := concat("", [
		"budget ",
		b.id,
		" of ",
		key(b.per),
		" would reach ",
		format_int(total(b), 10),
		" ",
		b.currency,
		" minor units; its limit is ",
		format_int(b.limit_minor, 10),
	])
	finding := {
		"code": "budget_exhausted",
		"rule": "budget.limit",
		"state": "ESCALATE",
		"controls": [],
		"message": text1,
		"details": {"budget": b.id, "key": key(b.per), "total_minor": total(b), "limit_minor": b.limit_minor},
	}
}

# METADATA
# description: HUMAN_APPROVAL budget_approval_required past the budget's approval threshold.
# custom:
#   requires: [input.context.counters.budgets]
#   absent: "counts absent: context_missing (this evaluator)"
findings contains finding if {
	some b in applicable
	is_number(b.approval_threshold_minor)
	total(b) > b.approval_threshold_minor
	not _exhausted(b)
	text1 := concat("", [
		"budget ",
		b.id,
		" of ",
		key(b.per),
		" would reach ",
		format_int(total(b), 10),
		" ",
		b.currency,
		" minor units, past its approval threshold of ",
		format_int(b.approval_threshold_minor, 10),
	])
	finding := {
		"code": "budget_approval_required",
		"rule": "budget.approval_threshold",
		"state": "HUMAN_APPROVAL",
		"controls": ["independent_human_approval"],
		"message": text1,
		"details": {
			"budget": b.id,
			"key": key(b.per),
			"total_minor": total(b),
			"approval_threshold_minor": b.approval_threshold_minor,
			"approver_role": _approver,
		},
	}
}

# METADATA
# title: Velocity rules that apply
# description: Every velocity rule in the currency of a value transfer.
velocity_rules contains v if {
	financial.value_transfer
	some v in object.get(_params, "velocity", [])
	v.currency == _currency
}

# METADATA
# title: Velocity exceeded
# description: The velocity rules this value transfer takes past a threshold (count or sum, this one included).
velocity_exceeded contains v.id if {
	some v in velocity_rules
	_velocity_over(v)
}

_velocity_over(v) if (_count("velocity", v).count + 1) > v.max_count

_velocity_over(v) if (_count("velocity", v).sum_minor + _amount) > v.max_sum_minor

# METADATA
# description: A value transfer past a velocity rule's count or sum gets the rule's outcome.
# custom:
#   requires: [input.context.counters.velocity]
#   absent: "counts absent: context_missing (this evaluator)"
findings contains finding if {
	some v in velocity_rules
	v.id in velocity_exceeded
	c := _count("velocity", v)
	text1 := concat("", [
		"velocity ",
		v.id,
		" of ",
		key(v.per),
		": ",
		format_int(c.count + 1, 10),
		" transfers summing ",
		format_int(c.sum_minor + _amount, 10),
		" ",
		v.currency,
		" minor units in ",
		format_int(v.window_seconds, 10),
		" s",
	])
	finding := {
		"code": "velocity_exceeded",
		"rule": "budget.velocity",
		"state": _outcome[v.outcome].state,
		"controls": _outcome[v.outcome].controls,
		"message": text1,
		"details": {
			"velocity": v.id,
			"key": key(v.per),
			"count": c.count + 1,
			"sum_minor": c.sum_minor + _amount,
			"approver_role": _approver,
		},
	}
}

# Rate limits: the unit's KCP rate_limits (a unit block replaces the root's), the tier by the
# caller's auth state (authenticated when the gate bound a principal, else default; an
# authenticated caller of a unit without that tier gets the default tier's limits).
default _authenticated := false

_authenticated if {
	is_string(_action.authorization_context.authenticated_principal)
	_action.authorization_context.authenticated_principal != ""
}

# METADATA
# title: The principal requests are counted for
principal := _action.authorization_context.authenticated_principal if _authenticated

principal := _action.agent_id if {
	not _authenticated
	is_string(_action.agent_id)
}

_limits := facts.profile.rate_limits if is_object(facts.profile.rate_limits)

_tier := _limits.authenticated if {
	_authenticated
	is_object(_limits.authenticated)
} else := _limits.default if {
	is_object(_limits.default)
} else := {}

# METADATA
# title: The unit's rate limits for this caller
# description: Window name -> the positive integer limit (unlimited and non-windows left out).
limits[window] := limit if {
	some window in ["requests_per_minute", "requests_per_hour", "requests_per_day"]
	limit := _tier[window]
	is_number(limit)
}

_unit_key := concat("/", [
	object.get(_action, ["knowledge", "project"], ""),
	object.get(_action, ["knowledge", "unit"], ""),
])

_rate := r if {
	r := _counters.rate
	r.unit == _unit_key
	r.principal == principal
}

# METADATA
# description: A request past the unit's limit in a window gets the matrix's rate-limit outcome.
# custom:
#   requires: [input.context.counters.rate]
#   absent: "counts absent: context_missing (this evaluator)"
findings contains finding if {
	some window, limit in limits
	_rate[window] > limit
	outcome := object.get(_params, ["rate_limits", "outcome"], "DENY")
	text1 := concat("", [
		"request ",
		format_int(_rate[window], 10),
		" of ",
		principal,
		" on ",
		_unit_key,
		" past ",
		window,
		" ",
		format_int(limit, 10),
	])
	finding := {
		"code": "rate_limited",
		"rule": "budget.rate_limit",
		"state": _outcome[outcome].state,
		"controls": _outcome[outcome].controls,
		"message": text1,
		"details": {
			"window": window,
			"limit": limit,
			"requests": _rate[window],
			"unit": _unit_key,
			"approver_role": _approver,
		},
	}
}

# Present counts, collected positively and compared as sets (`not is_number(undefined)` differs
# between the engines, docs/engine-findings.md item 11).
_budgets_counted contains b.id if {
	some b in applicable
	is_number(total(b))
}

_velocity_counted contains v.id if {
	some v in velocity_rules
	c := _count("velocity", v)
	is_number(c.count)
	is_number(c.sum_minor)
}

_windows_counted contains window if {
	some window, _ in limits
	is_number(_rate[window])
}

# METADATA
# title: Counts a declared limit needs and the input lacks
missing contains path if {
	some b in applicable
	not b.id in _budgets_counted
	path := concat(".", ["input.context.counters.budgets", b.id])
}

missing contains path if {
	some v in velocity_rules
	not v.id in _velocity_counted
	path := concat(".", ["input.context.counters.velocity", v.id])
}

missing contains "input.context.counters.rate" if count(_windows_counted) < count(limits)

# METADATA
# description: ESCALATE context_missing for a budget whose attested spend cannot be established (never counted).
# custom:
#   requires: []
findings contains finding if {
	some id in metering_unusable
	path := concat(".", ["input.context.metering", id])
	finding := {
		"code": "context_missing",
		"rule": "budget.metering",
		"state": "ESCALATE",
		"controls": [],
		"message": concat("", [
			"budget ",
			id,
			" has attested spend that is stale, refused or not in its currency (",
			path,
			"); it is not counted and nothing is allowed without it",
		]),
		"details": {"fields": [path]},
	}
}

# METADATA
# description: ESCALATE context_missing for each count a declared limit needs (never the stated budget_state).
# custom:
#   requires: []
findings contains finding if {
	some path in missing
	finding := {
		"code": "context_missing",
		"rule": "budget.counters",
		"state": "ESCALATE",
		"controls": [],
		"message": concat("", [
			"a declared limit needs ",
			path,
			" from the gate's own history and the input lacks it; nothing is allowed without it",
		]),
		"details": {"fields": [path]},
	}
}

# METADATA
# title: Applies (the decision plan, compile time)
# description: |
#   Whether this evaluator can find anything (or owe an obligation) for a unit of `profile` and an
#   action of type `task`, from declarations alone. `kcp-opa compile` evaluates it over every
#   profile and every action type the matrix names into the bundle's decision plan; a decision
#   reaches this evaluator only when its plan row names it (kcp.gate.planned). It may
#   over-approximate (a needless visit costs time) but never miss (a miss skips a finding). It
#   reads only its arguments and data.kcp_data, never input. docs/extending.md.
applies(_, _) if {
	some b in object.get(_params, "budgets", [])
	b.task_types == "all"
}

applies(_, task) if {
	some b in object.get(_params, "budgets", [])
	task in b.task_types
}

applies(_, _) if count(object.get(_params, "velocity", [])) > 0

applies(profile, _) if {
	some tier in profile.rate_limits
	some window in ["requests_per_minute", "requests_per_hour", "requests_per_day"]
	is_number(tier[window])
}
