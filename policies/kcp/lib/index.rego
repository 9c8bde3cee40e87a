# METADATA
# title: Compiled-data lookups
# description: |
#   Reads the indexes that `kcp-opa compile` writes under data.kcp_data (units, cells).
#   Entries sit in nested arrays of 16, one level per hex digit of sha256 of the key parts
#   joined with "/" (kcp_opa/datadoc.py builds the same tree). Array indexing is constant
#   time in both engines; object keys are not in regopy, and regopy's `%` is wrong on large
#   numbers, so the digits index the arrays directly.
package kcp.lib.index

import rego.v1

_hex_digits := "0123456789abcdef"

_digit(hash, i) := indexof(_hex_digits, substring(hash, i, 1))

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
# title: Effective unit
# description: The compiled effective unit `unit_id` of `project`; undefined when unknown.
unit(project, unit_id) := entry if {
	data.kcp_data.units.depth == 0
	entry := data.kcp_data.units.slots[project][unit_id]
}

unit(project, unit_id) := entry if {
	data.kcp_data.units.depth == 1
	hash := _hash([project, unit_id])
	entry := data.kcp_data.units.slots[_digit(hash, 0)][project][unit_id]
}

unit(project, unit_id) := entry if {
	data.kcp_data.units.depth == 2
	hash := _hash([project, unit_id])
	entry := data.kcp_data.units.slots[_digit(hash, 0)][_digit(hash, 1)][project][unit_id]
}

unit(project, unit_id) := entry if {
	data.kcp_data.units.depth == 3
	hash := _hash([project, unit_id])
	entry := data.kcp_data.units.slots[_digit(hash, 0)][_digit(hash, 1)][_digit(hash, 2)][project][unit_id]
}

unit(project, unit_id) := entry if {
	data.kcp_data.units.depth == 4
	hash := _hash([project, unit_id])
	entry := data.kcp_data.units.slots[_digit(hash, 0)][_digit(hash, 1)][_digit(hash, 2)][_digit(hash, 3)][project][unit_id]
}

# METADATA
# title: Known unit
# description: True when the deployment declares unit `unit_id` in `project`.
unit_known(project, unit_id) if unit(project, unit_id)

# METADATA
# title: Matrix cell
# description: |
#   The autonomy level agreed for `task_type` on `dimension` ("data_categories" or
#   "sensitivity") = `value`; undefined when the matrix does not cover it.
cell(task_type, dimension, value) := entry if {
	data.kcp_data.cells.depth == 0
	entry := data.kcp_data.cells.slots[task_type][dimension][value]
}

cell(task_type, dimension, value) := entry if {
	data.kcp_data.cells.depth == 1
	hash := _hash([task_type, dimension, value])
	entry := data.kcp_data.cells.slots[_digit(hash, 0)][task_type][dimension][value]
}

cell(task_type, dimension, value) := entry if {
	data.kcp_data.cells.depth == 2
	hash := _hash([task_type, dimension, value])
	entry := data.kcp_data.cells.slots[_digit(hash, 0)][_digit(hash, 1)][task_type][dimension][value]
}

cell(task_type, dimension, value) := entry if {
	data.kcp_data.cells.depth == 3
	hash := _hash([task_type, dimension, value])
	entry := data.kcp_data.cells.slots[_digit(hash, 0)][_digit(hash, 1)][_digit(hash, 2)][task_type][dimension][value]
}

cell(task_type, dimension, value) := entry if {
	data.kcp_data.cells.depth == 4
	hash := _hash([task_type, dimension, value])
	entry := data.kcp_data.cells.slots[_digit(hash, 0)][_digit(hash, 1)][_digit(hash, 2)][_digit(hash, 3)][task_type][dimension][value]
}
