# METADATA
# title: Attested spend from metering issuers
# description: |
#   Spend the gate cannot see itself (an agent run's model and tool cost) comes as spend
#   attestations of issuers registered for metered_spend, verified by the context stage
#   (kcp_opa/context/metering.py: issuer, signature, form) and listed in input.context.metering
#   with their source. Whether one counts is decided here: it names the budget and the key the
#   budget counts under for this action, its period reaches into the budget's window (counted
#   whole, the stricter reading), and it is current at the decision time. One that is stale, in
#   another currency than the budget's, or refused (input.context.attestations_refused) is never
#   counted and makes the budget unusable: budget.rego holds it ESCALATE context_missing.
package kcp.lib.metering

import rego.v1

_metering := object.get(input, ["context", "metering"], [])

_refused := object.get(input, ["context", "attestations_refused"], [])

# The decision time, only when the input has one (no arithmetic on anything else).
_decided_at := t if {
	t := input.context.decision_epoch_seconds
	is_number(t)
}

default _timed := false

_timed if is_number(_decided_at)

# METADATA
# title: A metering source built this input (input.context.metering is a list)
default source := false

source if is_array(input.context.metering)

_names(b, k, m) if {
	m.budget == b.id
	m.subject == k
}

_in_window(b, m) if m.period_end_epoch_seconds > _decided_at - b.window_seconds

_spend_current(m) if m.expires_epoch_seconds > _decided_at

# METADATA
# title: Attested spend of budget b under key k
# description: The sum of the current spend attestations in b's currency whose period reaches into b's window.
spent(b, k) := sum([m.amount_minor |
	some m in _metering
	_names(b, k, m)
	_in_window(b, m)
	_spend_current(m)
	m.currency == b.currency
])

# METADATA
# title: Budget b's attested spend under key k cannot be established
# description: |
#   Stale at the decision time, in another currency, refused, not placed in time, or a metered
#   budget without a source.
unusable(b, k) if {
	some m in _metering
	_names(b, k, m)
	_in_window(b, m)
	not _spend_current(m)
}

unusable(b, k) if {
	some m in _metering
	_names(b, k, m)
	_in_window(b, m)
	m.currency != b.currency
}

unusable(b, k) if {
	some m in _metering
	_names(b, k, m)
	not _timed
}

unusable(b, _) if {
	some r in _refused
	r.fact == "metered_spend"
	object.get(r, "budget", b.id) == b.id
}

unusable(b, _) if {
	b.metered == true
	not source
}
