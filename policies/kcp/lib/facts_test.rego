package kcp.lib.facts_test

import rego.v1

import data.kcp.lib.facts

_units := {"depth": 0, "count": 1, "slots": {"p": {"u": {"id": "u", "compliance": {"restrictions": ["no-logging"]}}}}}

test_unit_is_looked_up_from_input if {
	units := _units
	knowledge := {"project": "p", "unit": "u"}
	facts.unit.id == "u" with input.action.knowledge as knowledge with data.kcp_data.units as units
	facts.knowledge_bound with input.action.knowledge as knowledge with data.kcp_data.units as units
}

test_restricted if {
	units := _units
	knowledge := {"project": "p", "unit": "u"}
	facts.restricted("no-logging") with input.action.knowledge as knowledge with data.kcp_data.units as units
	not facts.restricted("no-external-llm") with input.action.knowledge as knowledge with data.kcp_data.units as units
}

test_not_knowledge_bound_without_unit if {
	not facts.knowledge_bound with input.action as {"action_type": "payment"}
}
