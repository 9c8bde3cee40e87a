# The compiled indexes at every depth (0-4), for the lookups the gate uses (kcp.lib.facts.unit,
# kcp.evaluators.matrix._row) and the index functions (kcp.lib.index). sha256("q/u") starts
# 7e6f and sha256("refund") 1d63: four different hex digits, so a lookup that reads the wrong
# digit (or the wrong depth) misses. The trees are sparse: an object keyed by the digit stands
# in for the array of 16, which indexes the same way.
package kcp.lib.index_depth_test

import rego.v1

import data.kcp.evaluators.matrix
import data.kcp.lib.facts
import data.kcp.lib.index

_entry := {"profile": 0, "validated_epoch_day": 1}

_row := {"sensitivity": {"internal": "approve"}}

_units_0 := {"depth": 0, "count": 1, "slots": {"q": {"u": _entry}}}

_tasks_0 := {"depth": 0, "count": 1, "slots": {"refund": _row}}

_units_1 := {"depth": 1, "count": 1, "slots": {7: {"q": {"u": _entry}}}}

_tasks_1 := {"depth": 1, "count": 1, "slots": {1: {"refund": _row}}}

_units_2 := {"depth": 2, "count": 1, "slots": {7: {14: {"q": {"u": _entry}}}}}

_tasks_2 := {"depth": 2, "count": 1, "slots": {1: {13: {"refund": _row}}}}

_units_3 := {"depth": 3, "count": 1, "slots": {7: {14: {6: {"q": {"u": _entry}}}}}}

_tasks_3 := {"depth": 3, "count": 1, "slots": {1: {13: {6: {"refund": _row}}}}}

_units_4 := {"depth": 4, "count": 1, "slots": {7: {14: {6: {15: {"q": {"u": _entry}}}}}}}

_tasks_4 := {"depth": 4, "count": 1, "slots": {1: {13: {6: {3: {"refund": _row}}}}}}

test_index_unit_at_depth_0 if {
	units := _units_0
	index.unit("q", "u") == _entry with data.kcp_data.units as units
	not index.unit("q", "v") with data.kcp_data.units as units
}

test_facts_unit_at_depth_0 if {
	units := _units_0
	action := {"knowledge": {"project": "q", "unit": "u"}}
	facts.unit == _entry with data.kcp_data.units as units with input.action as action
}

test_index_task_row_at_depth_0 if {
	tasks := _tasks_0
	index.task_row("refund") == _row with data.kcp_data.tasks as tasks
	not index.task_row("send") with data.kcp_data.tasks as tasks
}

test_matrix_row_at_depth_0 if {
	tasks := _tasks_0
	action := {"action_type": "refund"}
	matrix._row == _row with data.kcp_data.tasks as tasks with input.action as action
}

test_index_unit_at_depth_1 if {
	units := _units_1
	index.unit("q", "u") == _entry with data.kcp_data.units as units
	not index.unit("q", "v") with data.kcp_data.units as units
}

test_facts_unit_at_depth_1 if {
	units := _units_1
	action := {"knowledge": {"project": "q", "unit": "u"}}
	facts.unit == _entry with data.kcp_data.units as units with input.action as action
}

test_index_task_row_at_depth_1 if {
	tasks := _tasks_1
	index.task_row("refund") == _row with data.kcp_data.tasks as tasks
	not index.task_row("send") with data.kcp_data.tasks as tasks
}

test_matrix_row_at_depth_1 if {
	tasks := _tasks_1
	action := {"action_type": "refund"}
	matrix._row == _row with data.kcp_data.tasks as tasks with input.action as action
}

test_index_unit_at_depth_2 if {
	units := _units_2
	index.unit("q", "u") == _entry with data.kcp_data.units as units
	not index.unit("q", "v") with data.kcp_data.units as units
}

test_facts_unit_at_depth_2 if {
	units := _units_2
	action := {"knowledge": {"project": "q", "unit": "u"}}
	facts.unit == _entry with data.kcp_data.units as units with input.action as action
}

test_index_task_row_at_depth_2 if {
	tasks := _tasks_2
	index.task_row("refund") == _row with data.kcp_data.tasks as tasks
	not index.task_row("send") with data.kcp_data.tasks as tasks
}

test_matrix_row_at_depth_2 if {
	tasks := _tasks_2
	action := {"action_type": "refund"}
	matrix._row == _row with data.kcp_data.tasks as tasks with input.action as action
}

test_index_unit_at_depth_3 if {
	units := _units_3
	index.unit("q", "u") == _entry with data.kcp_data.units as units
	not index.unit("q", "v") with data.kcp_data.units as units
}

test_facts_unit_at_depth_3 if {
	units := _units_3
	action := {"knowledge": {"project": "q", "unit": "u"}}
	facts.unit == _entry with data.kcp_data.units as units with input.action as action
}

test_index_task_row_at_depth_3 if {
	tasks := _tasks_3
	index.task_row("refund") == _row with data.kcp_data.tasks as tasks
	not index.task_row("send") with data.kcp_data.tasks as tasks
}

test_matrix_row_at_depth_3 if {
	tasks := _tasks_3
	action := {"action_type": "refund"}
	matrix._row == _row with data.kcp_data.tasks as tasks with input.action as action
}

test_index_unit_at_depth_4 if {
	units := _units_4
	index.unit("q", "u") == _entry with data.kcp_data.units as units
	not index.unit("q", "v") with data.kcp_data.units as units
}

test_facts_unit_at_depth_4 if {
	units := _units_4
	action := {"knowledge": {"project": "q", "unit": "u"}}
	facts.unit == _entry with data.kcp_data.units as units with input.action as action
}

test_index_task_row_at_depth_4 if {
	tasks := _tasks_4
	index.task_row("refund") == _row with data.kcp_data.tasks as tasks
	not index.task_row("send") with data.kcp_data.tasks as tasks
}

test_matrix_row_at_depth_4 if {
	tasks := _tasks_4
	action := {"action_type": "refund"}
	matrix._row == _row with data.kcp_data.tasks as tasks with input.action as action
}
