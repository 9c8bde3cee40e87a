# METADATA
# title: Identifier lists
# description: |
#   Set work over the identifier lists an action carries (fields_read, capabilities), done by
#   native builtins only. A set or object comprehension is superlinear in regopy (1,024
#   strings cost ~2 s; docs/engine-findings.md item 28), so a hostile action at the contract's
#   caps could hold the gate for seconds; these functions are linear on both engines.
#   They rely on identifiers (docs/input-contract.md: letters, digits and _ . : / @ + ~ = # * -),
#   which need no JSON escape and hold no comma, and fail closed on anything else.
package kcp.lib.names

import rego.v1

# METADATA
# title: Not an identifier
# description: |
#   The key `as_keys` returns for a list holding a string that is not an identifier: no
#   declaration or capability lists it, so a check subtracting from it finds it outside.
not_an_identifier := "(a name that is not an identifier)"

# METADATA
# title: Only identifiers
# description: |
#   True when every string in `names` is an identifier: no character outside the set in their
#   concatenation (one native regex). Not an anchored `^[...]*$`: on a string of ~30,000
#   characters that crashes regopy (SIGSEGV; docs/engine-findings.md item 31).
identifiers(names) if not regex.match(`[^A-Za-z0-9_.:/@+~=#*-]`, concat("", names))

# METADATA
# title: Identifiers as object keys
# description: |
#   The identifiers in `names` as the keys of an object (each value true), duplicates once:
#   a set that `object.remove(as_keys(xs), ys)` subtracts from natively. A list holding a
#   non-identifier gives `{not_an_identifier: true}` instead, so the subtraction is never empty.
#   One body chained by `else`: the regex runs once a call, where three bodies ran it twice.
as_keys(names) := {} if {
	count(names) == 0
} else := json.unmarshal(concat("", [`{"`, concat(`":true,"`, names), `":true}`])) if {
	identifiers(names)
} else := {not_an_identifier: true}

# METADATA
# title: Identifiers with a suffix
# description: |
#   Each identifier in `names` with `suffix` appended, in order (for `strings.any_prefix_match`).
#   Empty for a list holding a non-identifier: nothing then counts as narrower than it.
#   Chained by `else`, as as_keys.
with_suffix(names, suffix) := [] if {
	count(names) == 0
} else := split(concat("", [concat(concat("", [suffix, ","]), names), suffix]), ",") if {
	identifiers(names)
} else := []
