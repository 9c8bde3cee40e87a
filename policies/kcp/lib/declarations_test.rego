package kcp.lib.declarations_test

import rego.v1

import data.kcp.lib.declarations

test_the_four_unenforceable_restrictions_are_refused if {
	refused := declarations.refused.restrictions
	count(refused) == 4
	"no-redistribution" in refused
	"no-caching" in refused
	"encryption-at-rest-required" in refused
	"anonymisation-required" in refused
}

test_every_value_names_a_rule_or_a_status if {
	every _, values in declarations.table {
		every _, rule in values {
			_named(rule)
		}
	}
}

_named(rule) if rule in {"refused", "advisory"}

_named(rule) if startswith(rule, "kcp.")

test_regulations_are_advisory_never_refused if {
	count(declarations.table.regulations) > 0
	every _, rule in declarations.table.regulations {
		rule == "advisory"
	}
	not declarations.refused.regulations
}

test_the_conditions_are_environment_and_agent_role if {
	count(declarations.table.conditions) == 2
	declarations.table.conditions.environment == "kcp.lib.visibility"
	declarations.table.conditions.agent_role == "kcp.lib.visibility"
}

test_no_ai_training_is_read_by_its_rule if {
	declarations.table.restrictions["no-ai-training"] == "kcp.restrictions.no-ai-training"
}
