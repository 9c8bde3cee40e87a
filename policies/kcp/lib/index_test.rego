package kcp.lib.index_test

import rego.v1

import data.kcp.lib.index

# sha256("p/u") starts with "2f", sha256("p/v") with "a", sha256("read/sensitivity/public") with "f".
_flat := {"depth": 0, "count": 2, "slots": {"p": {"u": {"id": "u"}, "v": {"id": "v"}}}}

_one_level := {"depth": 1, "count": 2, "slots": array.concat(
	array.concat([{}, {}, {"p": {"u": {"id": "u"}}}], [{} | some _ in numbers.range(3, 9)]),
	array.concat([{"p": {"v": {"id": "v"}}}], [{} | some _ in numbers.range(11, 15)]),
)}

test_leaf_path_is_the_hash_digits if {
	index.leaf_path(["p", "u"], 2) == [2, 15]
	index.leaf_path(["p", "u"], 0) == []
}

# regopy ignores `with data.x as <rule>` (and crashes on `with input as <rule>`): bind the
# mock to a local variable first. See docs/engine-findings.md.

test_unit_found_in_a_flat_index if {
	units := _flat
	index.unit("p", "u") == {"id": "u"} with data.kcp_data.units as units
}

test_unit_found_one_level_down if {
	units := _one_level
	index.unit("p", "u") == {"id": "u"} with data.kcp_data.units as units
	index.unit("p", "v") == {"id": "v"} with data.kcp_data.units as units
}

test_unknown_unit_is_undefined if {
	units := _one_level
	flat := _flat
	index.unit("p", "u") with data.kcp_data.units as units
	not index.unit("p", "nope") with data.kcp_data.units as units
	not index.unit("q", "u") with data.kcp_data.units as units
	not index.unit_known("p", "nope") with data.kcp_data.units as flat
}

test_unit_known if {
	units := _one_level
	index.unit_known("p", "v") with data.kcp_data.units as units
}

test_unit_in_the_wrong_leaf_is_not_found if {
	# An entry placed where its hash does not lead is invisible: lookups never scan.
	misplaced := {"depth": 1, "count": 1, "slots": [{"p": {"u": {"id": "u"}}} | some _ in numbers.range(0, 1)]}
	not index.unit("p", "u") with data.kcp_data.units as misplaced
}

test_cell_lookup if {
	# sha256("read") starts with 3: the row sits in slot 3 at depth 1.
	tasks := {"depth": 1, "count": 1, "slots": array.concat(
		array.concat([{} | some _ in numbers.range(0, 2)], [{"read": {"sensitivity": {"public": "autonomous"}}}]),
		[{} | some _ in numbers.range(4, 15)],
	)}
	index.cell("read", "sensitivity", "public") == "autonomous" with data.kcp_data.tasks as tasks
	not index.cell("read", "sensitivity", "restricted") with data.kcp_data.tasks as tasks
	not index.cell("write", "sensitivity", "public") with data.kcp_data.tasks as tasks
}
