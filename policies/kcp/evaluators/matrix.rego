# METADATA
# title: Delegation matrix
# description: |
#   The autonomy level agreed for the action's task type (action_type) on each of the unit's
#   data categories and on its sensitivity. Every applicable cell must exist: a combination
#   the matrix does not cover denies, and so does a task type it does not list.
#   autonomous = nothing, confirm = USER_CONFIRMATION, approve = HUMAN_APPROVAL, forbidden = DENY.
# custom:
#   evaluator_id: delegation_matrix_check
#   evaluator_version: "1.0.0"
package kcp.evaluators.matrix

import rego.v1

import data.kcp.evaluators.finding
import data.kcp.lib.facts
import data.kcp.lib.index

evaluator := {"id": "delegation_matrix_check", "version": "1.0.0"}

_task := input.action.action_type

_route := {
	"confirm": {"state": "USER_CONFIRMATION", "controls": ["user_confirmation"]},
	"approve": {"state": "HUMAN_APPROVAL", "controls": ["independent_human_approval"]},
	"forbidden": {"state": "DENY", "controls": []},
}

# METADATA
# title: Cells the action needs
# description: One per data category of the unit, and one for its sensitivity.
needed contains ["data_categories", category] if {
	some category in facts.unit.compliance.data_categories
}

needed contains ["sensitivity", sensitivity] if {
	facts.knowledge_bound
	sensitivity := _sensitivity
}

_sensitivity := facts.unit.sensitivity if is_string(facts.unit.sensitivity)

_sensitivity := "undeclared" if {
	facts.unit
	not is_string(facts.unit.sensitivity)
}

_tasks := data.kcp_data.tasks

_task_hash := crypto.sha256(_task)

# The action's matrix row, looked up with rules over input (cheaper than index.task_row in regopy).
_row := _tasks.slots[_task] if _tasks.depth == 0

_row := _tasks.slots[index.digit(_task_hash, 0)][_task] if _tasks.depth == 1

_row := _tasks.slots[index.digit(_task_hash, 0)][index.digit(_task_hash, 1)][_task] if _tasks.depth == 2

_row := entry if {
	_tasks.depth == 3
	entry := _tasks.slots[index.digit(_task_hash, 0)][index.digit(_task_hash, 1)][index.digit(_task_hash, 2)][_task]
}

_row := entry if {
	_tasks.depth == 4
	entry := _tasks.slots[index.digit(_task_hash, 0)][index.digit(_task_hash, 1)][index.digit(_task_hash, 2)][index.digit(_task_hash, 3)][_task]
}

_task_listed if _row

# METADATA
# title: Agreed levels for the needed cells
levels contains {"dimension": cell[0], "value": cell[1], "level": level} if {
	some cell in needed
	level := _row[cell[0]][cell[1]]
}

_covered contains [l.dimension, l.value] if some l in levels

# METADATA
# title: Findings
findings contains finding.new(
	evaluator, "task_type_not_in_matrix", "kcp.matrix.task_type", "DENY", [],
	text1,
	{"task_type": _task},
) if {
	text1 := sprintf("task type %v is not in the delegation matrix", [_task])
	not _task_listed
}

findings contains finding.new(
	evaluator, "matrix_not_covered", "kcp.matrix.cell", "DENY", [],
	text1,
	{"task_type": _task, "dimension": cell[0], "value": cell[1]},
) if {
	_task_listed
	some cell in needed
	not cell in _covered
	text1 := sprintf("the delegation matrix has no level for %v on %v=%v", [_task, cell[0], cell[1]])
}

findings contains finding.new(
	evaluator, text1, "kcp.matrix.cell", _route[l.level].state, _route[l.level].controls,
	text2,
	{"task_type": _task, "dimension": l.dimension, "value": l.value, "level": l.level},
) if {
	some l in levels
	l.level != "autonomous"
	text1 := concat("_", ["matrix", l.level])
	text2 := sprintf("the delegation matrix sets %v for %v on %v=%v", [l.level, _task, l.dimension, l.value])
}
