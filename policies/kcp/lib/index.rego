# METADATA
# title: Compiled-data lookups
# description: |
#   Reads the indexes that `kcp-opa compile` writes under data.kcp_data (units, tasks).
#   Entries sit in nested arrays of 16, one level per hex digit of sha256 of the key parts
#   joined with "/" (kcp_opa/datadoc.py builds the same tree). Array indexing is constant
#   time in both engines; object keys are not in regopy, and regopy's `%` is wrong on large
#   numbers, so the digits index the arrays directly.
package kcp.lib.index

import rego.v1

_hex_digits := "0123456789abcdef"

_digit(hash, i) := indexof(_hex_digits, substring(hash, i, 1))

# METADATA
# title: Hex digit
# description: |
#   The value (0-15) of hex digit `i` of `hash`: one level of the index. Hot paths
#   (kcp.lib.facts, kcp.evaluators.matrix) walk the index with rules over input and call
#   only this; rules cost regopy about half what the lookup functions below do.
digit(hash, i) := indexof(_hex_digits, substring(hash, i, 1))

_hash(parts) := crypto.sha256(concat("/", parts))

# METADATA
# title: Leaf path
# description: The first `depth` hex digits (0-15) of the key `parts`, as array indexes.
leaf_path(parts, depth) := [d | some i in [0, 1, 2, 3]; i < depth; d := _digit(_hash(parts), i)]

# Each lookup is one function whose bodies differ only in depth, and each body goes from the
# static data path all the way to the entry. Measured on 10,000 units (docs/engine-findings.md):
# a helper returning the leaf object costs regopy ~1 s per call, a dynamic data.kcp_data[name]
# ~6 s, and passing the index as an argument costs OPA ~400 ms (it hashes arguments); this
# shape costs ~140 us on regopy and ~50 us on OPA, flat from 100 to 100,000 units.

# METADATA
# title: Unit entry
# description: |
#   The index entry of unit `unit_id` of `project` (its own fields and its profile's
#   position in data.kcp_data.profiles); undefined when unknown.
unit(project, unit_id) := entry if {
	# mutate: equivalent another depth's index has no entry here (a string never indexes a digit array, a digit no name)
	data.kcp_data.units.depth == 0
	entry := data.kcp_data.units.slots[project][unit_id]
}

unit(project, unit_id) := entry if {
	# mutate: equivalent another depth's index has no entry here (a string never indexes a digit array, a digit no name)
	data.kcp_data.units.depth == 1
	hash := _hash([project, unit_id])
	entry := data.kcp_data.units.slots[_digit(hash, 0)][project][unit_id]
}

unit(project, unit_id) := entry if {
	# mutate: equivalent another depth's index has no entry here (a string never indexes a digit array, a digit no name)
	data.kcp_data.units.depth == 2
	hash := _hash([project, unit_id])
	entry := data.kcp_data.units.slots[_digit(hash, 0)][_digit(hash, 1)][project][unit_id]
}

unit(project, unit_id) := entry if {
	# mutate: equivalent another depth's index has no entry here (a string never indexes a digit array, a digit no name)
	data.kcp_data.units.depth == 3
	hash := _hash([project, unit_id])
	entry := data.kcp_data.units.slots[_digit(hash, 0)][_digit(hash, 1)][_digit(hash, 2)][project][unit_id]
}

unit(project, unit_id) := entry if {
	# mutate: equivalent another depth's index has no entry here (a string never indexes a digit array, a digit no name)
	data.kcp_data.units.depth == 4
	hash := _hash([project, unit_id])
	d0 := _digit(hash, 0)
	entry := data.kcp_data.units.slots[d0][_digit(hash, 1)][_digit(hash, 2)][_digit(hash, 3)][project][unit_id]
}

# METADATA
# title: Known unit
# description: True when the deployment declares unit `unit_id` in `project`.
unit_known(project, unit_id) if unit(project, unit_id)

# METADATA
# title: Matrix row
# description: |
#   The levels agreed for `task_type`, as {dimension: {value: level}}; undefined when the
#   matrix does not list the task type. A row is small (one entry per category and
#   sensitivity), so looking a cell up inside it is cheap in both engines.
task_row(task_type) := entry if {
	# mutate: equivalent another depth's index has no entry here (a string never indexes a digit array, a digit no name)
	data.kcp_data.tasks.depth == 0
	entry := data.kcp_data.tasks.slots[task_type]
}

task_row(task_type) := entry if {
	# mutate: equivalent another depth's index has no entry here (a string never indexes a digit array, a digit no name)
	data.kcp_data.tasks.depth == 1
	hash := _hash([task_type])
	entry := data.kcp_data.tasks.slots[_digit(hash, 0)][task_type]
}

task_row(task_type) := entry if {
	# mutate: equivalent another depth's index has no entry here (a string never indexes a digit array, a digit no name)
	data.kcp_data.tasks.depth == 2
	hash := _hash([task_type])
	entry := data.kcp_data.tasks.slots[_digit(hash, 0)][_digit(hash, 1)][task_type]
}

task_row(task_type) := entry if {
	# mutate: equivalent another depth's index has no entry here (a string never indexes a digit array, a digit no name)
	data.kcp_data.tasks.depth == 3
	hash := _hash([task_type])
	entry := data.kcp_data.tasks.slots[_digit(hash, 0)][_digit(hash, 1)][_digit(hash, 2)][task_type]
}

task_row(task_type) := entry if {
	# mutate: equivalent another depth's index has no entry here (a string never indexes a digit array, a digit no name)
	data.kcp_data.tasks.depth == 4
	hash := _hash([task_type])
	entry := data.kcp_data.tasks.slots[_digit(hash, 0)][_digit(hash, 1)][_digit(hash, 2)][_digit(hash, 3)][task_type]
}

# METADATA
# title: Matrix cell
# description: |
#   The autonomy level agreed for `task_type` on `dimension` ("data_categories" or
#   "sensitivity") = `value`; undefined when the matrix does not cover it.
cell(task_type, dimension, value) := task_row(task_type)[dimension][value]

# METADATA
# title: Unit profile
# description: The policy profile of unit `unit_id` of `project`; undefined when unknown.
unit_profile(project, unit_id) := data.kcp_data.profiles[unit(project, unit_id).profile]
