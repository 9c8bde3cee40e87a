package kcp.evaluators.matrix_test

import rego.v1

import data.kcp.evaluators.matrix

_units := {"depth": 0, "count": 2, "slots": {"p": {
	"crm": {"profile": 0},
	"bare": {"profile": 1},
}}}

_profiles := [
	{
		"sensitivity": "confidential",
		"compliance": {"data_categories": ["personal", "financial"]},
		"effective_visibility": _flat_confidential,
	},
	{"sensitivity": null, "compliance": {"data_categories": []}},
]

# The compiled form of a flat sensitivity (kcp_opa/declare/governance.py visibility_cells); the
# "bare" profile has none, as a hand-edited bundle: its level is "undeclared".
_flat_confidential := {"needs": [], "cells": {"": {"": _confidential}}, "incomplete": _confidential}

_confidential := {
	"sensitivity": "confidential",
	"requires_auth": false,
	"condition": null,
	"source": "flat sensitivity (no visibility block)",
}

_cells := {"depth": 0, "count": 4, "slots": {
	"read": {
		"data_categories": {"personal": "autonomous", "financial": "confirm"},
		"sensitivity": {"confidential": "autonomous"},
	},
	"write": {
		"data_categories": {"personal": "approve", "financial": "forbidden"},
		"sensitivity": {"confidential": "confirm"},
	},
}}

_matrix := {"task_types": ["read", "write"]}

test_strictest_cells_all_reported if {
	units := _units
	profiles := _profiles
	cells := _cells
	m := _matrix
	states := {f.code: f.state | some f in matrix.findings} with input.action.knowledge as {"project": "p", "unit": "crm"}
		with input.action.action_type as "write"
		with data.kcp_data.units as units with data.kcp_data.profiles as profiles
		with data.kcp_data.tasks as cells
		with data.kcp_data.matrix as m
	states == {"matrix_approve": "HUMAN_APPROVAL", "matrix_forbidden": "DENY", "matrix_confirm": "USER_CONFIRMATION"}
}

test_autonomous_except_confirm if {
	units := _units
	profiles := _profiles
	cells := _cells
	m := _matrix
	{f.code | some f in matrix.findings} == {"matrix_confirm"}
		with input.action.knowledge as {"project": "p", "unit": "crm"}
		with input.action.action_type as "read"
		with data.kcp_data.units as units with data.kcp_data.profiles as profiles
		with data.kcp_data.tasks as cells
		with data.kcp_data.matrix as m
}

test_unknown_task_type_denied if {
	units := _units
	profiles := _profiles
	cells := _cells
	m := _matrix
	{f.code | some f in matrix.findings} == {"task_type_not_in_matrix"}
		with input.action.knowledge as {"project": "p", "unit": "crm"}
		with input.action.action_type as "delete"
		with data.kcp_data.units as units with data.kcp_data.profiles as profiles
		with data.kcp_data.tasks as cells
		with data.kcp_data.matrix as m
}

test_undeclared_sensitivity_is_not_covered if {
	units := _units
	profiles := _profiles
	cells := _cells
	m := _matrix
	some f in matrix.findings with input.action.knowledge as {"project": "p", "unit": "bare"}
		with input.action.action_type as "read"
		with data.kcp_data.units as units with data.kcp_data.profiles as profiles
		with data.kcp_data.tasks as cells
		with data.kcp_data.matrix as m
	f.code == "matrix_not_covered"
	f.details.value == "undeclared"
}

test_action_without_unit_needs_only_a_listed_task if {
	cells := _cells
	m := _matrix
	count(matrix.findings) == 0 with input.action as {"action_type": "read"}
		with data.kcp_data.tasks as cells
		with data.kcp_data.matrix as m
}

# An unknown unit has no profile, so no cell is needed (not even sensitivity=undeclared): the
# unit evaluator denies it as unknown, and the matrix adds no finding of its own on top.
test_unknown_unit_needs_no_cell if {
	units := _units
	profiles := _profiles
	cells := _cells
	m := _matrix
	count(matrix.needed) == 0 with input.action.knowledge as {"project": "p", "unit": "ghost"}
		with input.action.action_type as "read"
		with data.kcp_data.units as units with data.kcp_data.profiles as profiles
		with data.kcp_data.tasks as cells
		with data.kcp_data.matrix as m
	count(matrix.findings) == 0 with input.action.knowledge as {"project": "p", "unit": "ghost"}
		with input.action.action_type as "read"
		with data.kcp_data.units as units with data.kcp_data.profiles as profiles
		with data.kcp_data.tasks as cells
		with data.kcp_data.matrix as m
}

# A declared sensitivity is one needed cell beside the data categories.
test_needed_cells_of_a_known_unit if {
	units := _units
	profiles := _profiles
	cells := _cells
	m := _matrix
	matrix.needed == {["data_categories", "personal"], ["data_categories", "financial"], ["sensitivity", "confidential"]}
		with input.action.knowledge as {"project": "p", "unit": "crm"}
		with input.action.action_type as "read"
		with data.kcp_data.units as units with data.kcp_data.profiles as profiles
		with data.kcp_data.tasks as cells
		with data.kcp_data.matrix as m
}
