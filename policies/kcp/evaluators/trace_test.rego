package kcp.evaluators.trace_test

import rego.v1

import data.kcp.evaluators.trace

_units := {"depth": 0, "count": 2, "slots": {"p": {
	"traced": {"profile": 0},
	"chain": {"profile": 1},
	"free": {"profile": 2},
}}}

_profiles := [
	{"trust": {"require_trace_context": true}, "delegation": {"audit_chain": false}},
	{"trust": {"require_trace_context": false}, "delegation": {"audit_chain": true}},
	{"trust": {"require_trace_context": false}, "delegation": {"audit_chain": false}},
]

_good := "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

test_valid_traceparent if {
	trace.valid_traceparent(_good)
	not trace.valid_traceparent("00-00000000000000000000000000000000-00f067aa0ba902b7-01")
	not trace.valid_traceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01")
	not trace.valid_traceparent("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	not trace.valid_traceparent("00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01")
	not trace.valid_traceparent(42)
}

test_missing_trace_denied_when_required if {
	units := _units
	profiles := _profiles
	some f in trace.findings
		with input.action.knowledge as {"project": "p", "unit": "traced"}
		with data.kcp_data.units as units
		with data.kcp_data.profiles as profiles
	f.code == "trace_context_invalid"
	count(trace.findings) == 1
		with input.action.knowledge as {"project": "p", "unit": "chain"}
		with data.kcp_data.units as units
		with data.kcp_data.profiles as profiles
}

test_valid_trace_passes if {
	units := _units
	profiles := _profiles
	good := _good
	count(trace.findings) == 0 with input.action.knowledge as {"project": "p", "unit": "traced"}
		with input.action.trace as {"traceparent": good}
		with data.kcp_data.units as units with data.kcp_data.profiles as profiles
}

test_not_required_no_finding if {
	units := _units
	profiles := _profiles
	count(trace.findings) == 0
		with input.action.knowledge as {"project": "p", "unit": "free"}
		with data.kcp_data.units as units
		with data.kcp_data.profiles as profiles
}
