# METADATA
# title: Identifier lists
# description: |
#   Set work over the identifier lists an action carries (fields_read, capabilities), done by
#   native builtins only. A set or object comprehension is superlinear in regopy (1,024
#   strings cost ~2 s; docs/engine-findings.md item 28), so a hostile action at the contract's
#   caps could hold the gate for seconds; these functions are linear on both engines.
#   Identifiers only (docs/input-contract.md: letters, digits and _ . : / @ + ~ = # * -):
#   they need no JSON escape and never contain a comma.
package kcp.lib.names

import rego.v1

# METADATA
# title: Identifiers as object keys
# description: |
#   The identifiers in `names` as the keys of an object (each value true), duplicates once:
#   a set that `object.remove(as_keys(xs), ys)` subtracts from natively.
as_keys(names) := {} if count(names) == 0

as_keys(names) := json.unmarshal(concat("", [`{"`, concat(`":true,"`, names), `":true}`])) if count(names) > 0

# METADATA
# title: Identifiers with a suffix
# description: Each identifier in `names` with `suffix` appended, in order (for `strings.any_prefix_match`).
with_suffix(names, suffix) := [] if count(names) == 0

with_suffix(names, suffix) := split(concat("", [concat(concat("", [suffix, ","]), names), suffix]), ",") if count(names) > 0
