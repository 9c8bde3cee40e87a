package kcp.evaluators.finding_test

import rego.v1

import data.kcp.evaluators.finding

test_controls_are_sorted_and_keys_fixed if {
	f := finding.new({"id": "e", "version": "1"}, "c", "r", "DENY", ["b", "a"], "m", {})
	f.controls == ["a", "b"]
	f.evaluator_id == "e"
	object.keys(f) == {"code", "rule", "evaluator_id", "evaluator_version", "state", "controls", "message", "details"}
}
