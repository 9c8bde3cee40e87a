package kcp.lib.facts_test

import rego.v1

import data.kcp.lib.facts
import data.kcp.lib.index

_units := {"depth": 0, "count": 1, "slots": {"p": {"u": {"profile": 1, "validated_epoch_day": 20000}}}}

_profiles := [{"compliance": {"restrictions": []}}, {"compliance": {"restrictions": ["no-logging"]}}]

test_unit_is_looked_up_from_input if {
	units := _units
	knowledge := {"project": "p", "unit": "u"}
	facts.unit.validated_epoch_day == 20000 with input.action.knowledge as knowledge with data.kcp_data.units as units
	facts.knowledge_bound with input.action.knowledge as knowledge with data.kcp_data.units as units
}

test_profile_is_the_one_the_unit_names if {
	units := _units
	profiles := _profiles
	knowledge := {"project": "p", "unit": "u"}
	facts.profile == {"compliance": {"restrictions": ["no-logging"]}} with input.action.knowledge as knowledge
		with data.kcp_data.units as units with data.kcp_data.profiles as profiles
}

test_missing_profile_is_null_and_the_unit_unknown if {
	# A unit whose profile is not in the bundle is not a known unit (the unit evaluator denies
	# it); the bundle compiler never writes one.
	units := {"depth": 0, "count": 1, "slots": {"p": {"u": {"profile": 7}}}}
	profiles := _profiles
	knowledge := {"project": "p", "unit": "u"}
	facts.profile == null
		with input.action.knowledge as knowledge
		with data.kcp_data.units as units
		with data.kcp_data.profiles as profiles
	not facts.unit_known
		with input.action.knowledge as knowledge
		with data.kcp_data.units as units
		with data.kcp_data.profiles as profiles
}

test_restricted if {
	units := _units
	profiles := _profiles
	knowledge := {"project": "p", "unit": "u"}
	facts.restricted("no-logging") with input.action.knowledge as knowledge
		with data.kcp_data.units as units with data.kcp_data.profiles as profiles
	not facts.restricted("no-external-llm") with input.action.knowledge as knowledge
		with data.kcp_data.units as units with data.kcp_data.profiles as profiles
}

test_not_knowledge_bound_without_unit if {
	not facts.knowledge_bound with input.action as {"action_type": "payment"}
	facts.unit == null with input.action as {"action_type": "payment"}
	facts.profile == null with input.action as {"action_type": "payment"}
	not facts.unit_known with input.action as {"action_type": "payment"}
}

test_rule_lookup_agrees_with_index_unit_at_depth_one if {
	# sha256("p/u") starts with 2; the unit sits in slot 2 at depth 1.
	units := {"depth": 1, "count": 1, "slots": array.concat(
		array.concat([{} | some _ in numbers.range(0, 1)], [{"p": {"u": {"id": "u"}}}]),
		[{} | some _ in numbers.range(3, 15)],
	)}
	knowledge := {"project": "p", "unit": "u"}
	facts.unit.id == "u" with input.action.knowledge as knowledge with data.kcp_data.units as units
	index.unit("p", "u").id == "u" with data.kcp_data.units as units
}
