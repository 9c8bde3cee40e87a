# METADATA
# title: Trusted context
# description: |
#   The gate and attested facts a decision rests on (docs/contract.md, "Facts"): the gate's value
#   from input.context.facts (built by the context stage from the trust registry, the gate's
#   configuration and signed attestations), never the action's statement about itself. A stated
#   value is only compared: `candidates[name]` holds the gate's value and the stated one, and
#   every rule fires on any candidate, so a statement can make a decision stricter, never laxer.
#   A fact the gate did not establish (or whose attestation has expired at the decision time) is
#   not in `established`: the rule that needs it fails closed and kcp.evaluators.context answers
#   context_missing. `conflicts` lists every stated value that
#   differs from the gate's.
package kcp.lib.trusted

import rego.v1

# METADATA
# title: Where an action may state a gate or attested fact
stated_paths := {
	"deployment_region": ["runtime", "deployment_region"],
	"environment": ["runtime", "environment"],
	"actor_role": ["authorization_context", "actor_role"],
	"agent_scope": ["authorization_context", "agent_scope"],
	"model_id": ["runtime", "model", "id"],
	"model_hosting": ["runtime", "model", "hosting"],
	"evidence_status": ["runtime", "evidence_status"],
	"new_beneficiary": ["attributes", "new_beneficiary"],
	"modified_beneficiary": ["attributes", "modified_beneficiary"],
	"screening_uncertain": ["attributes", "screening_uncertain"],
}

_facts := input.context.facts if is_object(input.context.facts) else := {}

_now := input.context.decision_epoch_seconds if is_number(input.context.decision_epoch_seconds) else := 0

_unset := {"kcp_opa": "unset"}

# An attested fact counts until its expiry; a gate fact has none. Collected once as the set of
# expired names: a function call per fact cost regopy more than the whole set.
_expired contains name if {
	some name, entry in _facts
	is_number(entry.expires_epoch_seconds)
	entry.expires_epoch_seconds <= _now
}

# METADATA
# title: The gate's value of each fact it established (and that is still current)
gate := {name: value |
	some name, entry in _facts
	stated_paths[name]
	is_object(entry)
	value := entry.value
	value != _unset
	not _expired[name]
}

# METADATA
# title: The facts the gate established
# description: |
#   The keys of gate, natively (a comprehension over gate, `{name | gate[name] == gate[name]}`,
#   cost regopy four times as much; `some name, _ in gate` in one aborts its planner).
established := object.keys(gate)

# METADATA
# title: What the action states about each fact
# description: |
#   One rule per path of stated_paths (trusted_test.rego checks they agree): ten references
#   cost regopy half of ten object.get calls over the paths.
stated["deployment_region"] := value if {
	value := _runtime.deployment_region
	value != _unset
}

stated["environment"] := value if {
	value := _runtime.environment
	value != _unset
}

stated["actor_role"] := value if {
	value := _authorization.actor_role
	value != _unset
}

stated["agent_scope"] := value if {
	value := _authorization.agent_scope
	value != _unset
}

stated["model_id"] := value if {
	value := _runtime.model.id
	value != _unset
}

stated["model_hosting"] := value if {
	value := _runtime.model.hosting
	value != _unset
}

stated["evidence_status"] := value if {
	value := _runtime.evidence_status
	value != _unset
}

stated["new_beneficiary"] := value if {
	value := _attributes.new_beneficiary
	value != _unset
}

stated["modified_beneficiary"] := value if {
	value := _attributes.modified_beneficiary
	value != _unset
}

stated["screening_uncertain"] := value if {
	value := _attributes.screening_uncertain
	value != _unset
}

_runtime := input.action.runtime

_authorization := input.action.authorization_context

_attributes := input.action.attributes


# METADATA
# title: The values every rule checks
# description: |
#   The gate's value and what the action states, when either is there: a rule fires on any of
#   them, so the stricter applies. Whether the gate established a fact is `established`, which
#   the fail-closed checks read: a statement alone never counts as established. Built from
#   the facts present (each stated one, then each gate one with any statement), not by trying
#   every name of stated_paths: fewer set comprehensions per decision on regopy.
candidates := object.union(
	{name: {value} | some name, value in stated},
	{name: values | some name, value in gate; values := {value} | {s | s := stated[name]}},
)

# METADATA
# title: Stated values that differ from the gate's
# description: |
#   Lists compare as sets of scopes (sorted). Written out, no _norm call: equal values never
#   conflict, two values of which one is not a list differ, and two lists are sorted only when
#   needed: the stated one first, which equals the gate's list whenever that is sorted (one
#   sort of a 256-scope statement, not two).
conflicts contains conflict if {
	some name, value in gate
	said := stated[name]
	said != value
	not is_array(said)
	conflict := {"fact": name, "gate": value, "stated": said}
}

conflicts contains conflict if {
	some name, value in gate
	said := stated[name]
	said != value
	not is_array(value)
	conflict := {"fact": name, "gate": value, "stated": said}
}

conflicts contains conflict if {
	some name, value in gate
	said := stated[name]
	# mutate: equivalent a shortcut: when said == value, sorted != sort(value) below fails too
	said != value
	is_array(said)
	is_array(value)
	sorted := sort(said)
	# mutate: equivalent a shortcut: when sorted == value, value is sorted and sorted != sort(value) fails
	sorted != value # value is a sorted list equal to sorted: sort(value) is too
	sorted != sort(value)
	conflict := {"fact": name, "gate": value, "stated": said}
}

# METADATA
# title: A flag raised by the gate (an attestation) or the action
# description: A true statement raises it; only the gate can lower it.
raised(name) if candidates[name][true]
