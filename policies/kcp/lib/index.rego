# METADATA
# title: Compiled-data lookups
# description: |
#   Reads the indexes that `kcp-opa compile` writes under data.kcp_data. Entries sit in
#   nested arrays of 16, one level per hex digit of sha256 of the key parts joined with "/"
#   (kcp_opa/datadoc.py builds the same tree). Array indexing is constant time in both
#   engines; object keys are not in regopy, and regopy's `%` is wrong on large numbers, so
#   the digits index the arrays directly.
package kcp.lib.index

import rego.v1

_hex_digits := "0123456789abcdef"

_digit(hash, i) := indexof(_hex_digits, substring(hash, i, 1))

# METADATA
# title: Leaf path
# description: The first `depth` hex digits (0-15) of the key `parts`, as array indexes.
leaf_path(parts, depth) := [d | some i in [0, 1, 2, 3]; i < depth; d := _digit(hash, i)] if {
	hash := crypto.sha256(concat("/", parts))
}

_leaf(index, _) := index.slots if index.depth == 0

_leaf(index, parts) := index.slots[_digit(hash, 0)] if {
	index.depth == 1
	hash := crypto.sha256(concat("/", parts))
}

_leaf(index, parts) := index.slots[_digit(hash, 0)][_digit(hash, 1)] if {
	index.depth == 2
	hash := crypto.sha256(concat("/", parts))
}

_leaf(index, parts) := index.slots[_digit(hash, 0)][_digit(hash, 1)][_digit(hash, 2)] if {
	index.depth == 3
	hash := crypto.sha256(concat("/", parts))
}

_leaf(index, parts) := index.slots[_digit(hash, 0)][_digit(hash, 1)][_digit(hash, 2)][_digit(hash, 3)] if {
	index.depth == 4
	hash := crypto.sha256(concat("/", parts))
}

# METADATA
# title: Effective unit
# description: The compiled effective unit `unit_id` of `project`; undefined when unknown.
unit(project, unit_id) := _leaf(data.kcp_data.units, [project, unit_id])[project][unit_id]

# METADATA
# title: Known unit
# description: True when the deployment declares unit `unit_id` in `project`.
unit_known(project, unit_id) if unit(project, unit_id)

# METADATA
# title: Matrix cell
# description: |
#   The autonomy level agreed for `task_type` on `dimension` ("data_categories" or
#   "sensitivity") = `value`; undefined when the matrix does not cover it.
cell(task_type, dimension, value) := _leaf(data.kcp_data.matrix.cells, [task_type, dimension, value])[task_type][dimension][value]
