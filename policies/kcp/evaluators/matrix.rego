# METADATA
# title: Delegation matrix
# description: |
#   The autonomy level agreed for the action's task type (action_type) on each of the unit's
#   data categories and on its effective sensitivity (KCP §4.16 visibility). Every applicable
#   cell must exist: a combination the matrix does not cover denies, and so does a task type it
#   does not list.
#   autonomous = nothing, confirm = USER_CONFIRMATION, approve = HUMAN_APPROVAL, forbidden = DENY.
# custom:
#   evaluator_id: delegation_matrix_check
#   evaluator_version: "1.0.0"
package kcp.evaluators.matrix

import rego.v1

import data.kcp.lib.facts
import data.kcp.lib.index
import data.kcp.lib.visibility

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
	some category in facts.profile.compliance.data_categories
}

needed contains ["sensitivity", sensitivity] if {
	# mutate: equivalent _sensitivity needs a known (so named) unit: knowledge_bound holds whenever the next line does
	facts.knowledge_bound
	sensitivity := _sensitivity
}

# The EFFECTIVE sensitivity (KCP §4.16: visibility conditions, else the flat sensitivity;
# "undeclared" for a known unit without one), a rule computed once per query in
# kcp.lib.visibility, never re-derived per cell.
_sensitivity := visibility.sensitivity

_task_hash := crypto.sha256(_task)

# The action's matrix row, looked up with rules over input (cheaper than index.task_row in
# regopy); static data paths in every body, never an alias rule (see kcp.lib.facts.unit).
# mutate: equivalent another depth's index has no entry here (a string never indexes a digit array, a digit no name)
_row := data.kcp_data.tasks.slots[_task] if data.kcp_data.tasks.depth == 0

# mutate: equivalent another depth's index has no entry here (a string never indexes a digit array, a digit no name)
_row := data.kcp_data.tasks.slots[index.digit(_task_hash, 0)][_task] if data.kcp_data.tasks.depth == 1

_row := entry if {
	# mutate: equivalent another depth's index has no entry here (a string never indexes a digit array, a digit no name)
	data.kcp_data.tasks.depth == 2
	d0 := index.digit(_task_hash, 0)
	entry := data.kcp_data.tasks.slots[d0][index.digit(_task_hash, 1)][_task]
}

_row := entry if {
	# mutate: equivalent another depth's index has no entry here (a string never indexes a digit array, a digit no name)
	data.kcp_data.tasks.depth == 3
	d0 := index.digit(_task_hash, 0)
	d1 := index.digit(_task_hash, 1)
	entry := data.kcp_data.tasks.slots[d0][d1][index.digit(_task_hash, 2)][_task]
}

_row := entry if {
	# mutate: equivalent another depth's index has no entry here (a string never indexes a digit array, a digit no name)
	data.kcp_data.tasks.depth == 4
	d0 := index.digit(_task_hash, 0)
	d1 := index.digit(_task_hash, 1)
	d2 := index.digit(_task_hash, 2)
	entry := data.kcp_data.tasks.slots[d0][d1][d2][index.digit(_task_hash, 3)][_task]
}

default _task_listed := false

_task_listed if _row

# METADATA
# title: Agreed level for a needed cell
# description: |
#   Looked up in the action's row where a finding needs it; no set of cell objects is built
#   (regopy charges ~70 us an object put in a set; docs/engine-findings.md item 22).
level(cell) := _row[cell[0]][cell[1]]

# METADATA
# title: Findings
# custom:
#   requires: [input.action.action_type]
#   absent: "task_type_not_in_matrix (this rule)"
findings contains finding if {
	not _task_listed
	text1 := concat("", ["task type ", _task_label, " is not in the delegation matrix"])
	finding := {
		"code": "task_type_not_in_matrix",
		"rule": "kcp.matrix.task_type",
		"state": "DENY",
		"controls": [],
		"message": text1,
		"details": {"task_type": _task_label},
	}
}

# METADATA
# custom:
#   requires: [input.action.action_type, input.action.knowledge.unit]
findings contains finding if {
	_task_listed
	some cell in needed
	not level(cell)
	text1 := concat("", ["the delegation matrix has no level for ", _task_label, " on ", cell[0], "=", cell[1]])
	finding := {
		"code": "matrix_not_covered",
		"rule": "kcp.matrix.cell",
		"state": "DENY",
		"controls": [],
		"message": text1,
		"details": {"task_type": _task_label, "dimension": cell[0], "value": cell[1]},
	}
}

# METADATA
# custom:
#   requires: [input.action.action_type, input.action.knowledge.unit]
#   facts: {environment: gate, actor_role: gate}
#   waivable: [matrix_confirm, matrix_approve]
findings contains finding if {
	some cell in needed
	agreed := level(cell)
	# mutate: equivalent _route has no "autonomous" key: without this line the state is undefined and no finding is made
	agreed != "autonomous"
	text1 := concat("_", ["matrix", agreed])
	text2 := concat("", ["the delegation matrix sets ", agreed, " for ", _task_label, " on ", cell[0], "=", cell[1]])
	finding := {
		"code": text1,
		"rule": "kcp.matrix.cell",
		"state": _route[agreed].state,
		"controls": _route[agreed].controls,
		"message": text2,
		"details": {"task_type": _task_label, "dimension": cell[0], "value": cell[1], "level": agreed},
	}
}

# Message parts are total (a default when the value is missing): a message built from an
# undefined value would make the whole finding undefined and drop a DENY (fail open). Messages
# use concat, never sprintf over strings (docs/engine-findings.md items 13 and 19).

_task_label := _task if is_string(_task)

_task_label := "(no action_type)" if not _task_label_given

_task_label_given if is_string(_task)

# METADATA
# title: Applies (the decision plan, compile time)
# description: |
#   Whether this evaluator can find anything (or owe an obligation) for a unit of `profile` and an
#   action of type `task`, from declarations alone. `kcp-opa compile` evaluates it over every
#   profile and every action type the matrix names into the bundle's decision plan; a decision
#   reaches this evaluator only when its plan row names it (kcp.gate.planned). It may
#   over-approximate (a needless visit costs time) but never miss (a miss skips a finding). It
#   reads only its arguments and data.kcp_data, never input. docs/extending.md.
applies(_, task) if _plan_row(task) == null

applies(profile, task) if {
	row := _plan_row(task)
	# mutate: equivalent a null row (no row for the type) has no cells: the first body plans it
	is_object(row)
	some category in profile.compliance.data_categories
	not _autonomous(row, "data_categories", category)
}

applies(profile, task) if {
	row := _plan_row(task)
	# mutate: equivalent a null row (no row for the type) has no cells: the first body plans it
	is_object(row)
	is_object(profile)
	some sensitivity in _sensitivities(profile)
	not _autonomous(row, "sensitivity", sensitivity)
}

_plan_row(task) := row if {
	row := index.task_row(task)
} else := null

_autonomous(row, dimension, value) if row[dimension][value] == "autonomous"

# Every sensitivity the unit's visibility can resolve to (kcp.lib.visibility.view picks one cell,
# or the incomplete entry); "undeclared" when it declares none.
_sensitivities(profile) := _cell_sensitivities(profile) | _incomplete_sensitivity(profile) if {
	is_object(profile.effective_visibility)
} else := {"undeclared"}

_incomplete_sensitivity(profile) := {s | s := profile.effective_visibility.incomplete.sensitivity}

_cell_sensitivities(profile) := {s |
	some row in profile.effective_visibility.cells
	some cell in row
	s := cell.sensitivity
}
