# METADATA
# title: Compiled-data lookups
# description: |
#   Reads the indexes that `kcp-opa compile` writes under data.kcp_data. Entries sit in an
#   array of slots chosen by the first four hex digits of sha256 of the key parts joined
#   with "/", modulo the slot count (kcp_opa/datadoc.py computes the same slot). Array
#   indexing is constant time in both engines; object keys are not in regopy.
package kcp.lib.index

import rego.v1

_hex_digits := "0123456789abcdef"

# METADATA
# title: Slot of a key
# description: The slot number for the key parts `parts` in an index of `size` slots.
slot(parts, size) := n if {
	h := crypto.sha256(concat("/", parts))
	n := ((((indexof(_hex_digits, substring(h, 0, 1)) * 16) + indexof(_hex_digits, substring(h, 1, 1))) * 16 + indexof(_hex_digits, substring(h, 2, 1))) * 16 + indexof(_hex_digits, substring(h, 3, 1))) % size
}

# METADATA
# title: Effective unit
# description: The compiled effective unit `unit_id` of `project`; undefined when unknown.
unit(project, unit_id) := data.kcp_data.units.slots[slot([project, unit_id], data.kcp_data.units.size)][project][unit_id]

# METADATA
# title: Known unit
# description: True when the deployment declares unit `unit_id` in `project`.
unit_known(project, unit_id) if unit(project, unit_id)

# METADATA
# title: Matrix cell
# description: |
#   The autonomy level agreed for `task_type` on `dimension` ("data_categories" or
#   "sensitivity") = `value`; undefined when the matrix does not cover it.
cell(task_type, dimension, value) := data.kcp_data.matrix.cells.slots[slot([task_type, dimension, value], data.kcp_data.matrix.cells.size)][task_type][dimension][value]
