package kcp.lib.names_test

import rego.v1

import data.kcp.lib.names

test_as_keys_is_the_set_of_the_identifiers if {
	names.as_keys([]) == {}
	names.as_keys(["email"]) == {"email": true}
	names.as_keys(["b", "a:x", "b", "x/y@z#1"]) == {"a:x": true, "b": true, "x/y@z#1": true}
}

test_as_keys_subtracts_with_object_remove if {
	rest := object.remove(names.as_keys(["name", "phone", "email", "phone"]), ["email", "name", "unused"])
	rest == {"phone": true}
}

test_with_suffix_appends_to_each_in_order if {
	names.with_suffix([], ":") == []
	names.with_suffix(["read"], ":") == ["read:"]
	names.with_suffix(["read:case", "a", "read:case"], ":") == ["read:case:", "a:", "read:case:"]
	names.with_suffix(["x", "y"], "") == ["x", "y"]
}

test_only_identifiers if {
	names.identifiers([])
	names.identifiers(["a-b", "c*~=#+@/:.", "X_9"])
	not names.identifiers(["a b"])
	not names.identifiers(["ok", "a,b"])
	not names.identifiers(["é"])
}

test_a_non_identifier_fails_closed if {
	names.as_keys(["ok", "a,b"]) == {names.not_an_identifier: true}
	object.remove(names.as_keys(["a b"]), ["a b", "a", "b"]) == {names.not_an_identifier: true}
	names.with_suffix(["read", "a b"], ":") == []
}
