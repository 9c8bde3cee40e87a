# METADATA
# title: Trace context
# description: |
#   When the manifest requires trace context (trust.audit.require_trace_context or
#   delegation.audit_chain), the action must carry a valid W3C traceparent:
#   00-<32 hex, not all zero>-<16 hex, not all zero>-<2 hex>.
# custom:
#   evaluator_id: trace_context_check
#   evaluator_version: "1.0.0"
package kcp.evaluators.trace

import rego.v1

import data.kcp.lib.facts

# METADATA
# title: Trace context required
default required := false

required if facts.profile.trust.require_trace_context == true

required if facts.profile.delegation.audit_chain == true

# METADATA
# title: Obligations
# description: The caller must propagate trace context whenever the manifest requires it.
obligations contains "trace_context" if required

# METADATA
# title: Valid traceparent
# description: True when `value` is a W3C traceparent with non-zero trace and parent ids.
valid_traceparent(value) if {
	is_string(value)
	regex.match(`^00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$`, value)
	parts := split(value, "-")
	parts[1] != "00000000000000000000000000000000"
	parts[2] != "0000000000000000"
}

default _valid := false

_valid if valid_traceparent(input.action.trace.traceparent)

# METADATA
# title: Findings
# custom:
#   requires: [input.action.knowledge.unit]
#   absent: "trace_context_missing (this rule)"
findings contains finding if {
	required
	not _valid
	finding := {
		"code": "trace_context_invalid",
		"rule": "kcp.trust.require_trace_context",
		"state": "DENY",
		"controls": [],
		"message": "trace context is required but trace.traceparent is missing or not a valid W3C traceparent",
		"details": {},
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
applies(profile, _) if profile.trust.require_trace_context == true

applies(profile, _) if profile.delegation.audit_chain == true
