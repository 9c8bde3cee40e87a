# METADATA
# title: KCP access and auth_scope
# description: |
#   KCP §4.11, with §4.16's requires_auth. `access: authenticated` needs an authenticated
#   principal in the action (authorization_context.authenticated_principal); `restricted`
#   needs one too and, when the unit declares an auth_scope, the principal's scopes
#   (authorization_context.principal_scopes) to contain it; a matched visibility condition with
#   requires_auth needs an authenticated principal whatever the access level. Otherwise DENY,
#   naming the missing credential (access_unauthenticated) or scope (access_scope_missing, the
#   scope in details.missing_scope). An access value outside the vocabulary is ignored as the
#   spec says (the unit is public) and `kcp-opa validate` warns about it.
# custom:
#   evaluator_id: access_check
#   evaluator_version: "1.0.0"
package kcp.evaluators.access

import rego.v1

import data.kcp.lib.facts
import data.kcp.lib.visibility

# METADATA
# title: Authenticated
# description: The action states the authenticated principal it acts for (a non-empty string).
default authenticated := false

authenticated if {
	is_string(input.action.authorization_context.authenticated_principal)
	input.action.authorization_context.authenticated_principal != ""
}

_why := {"authenticated": "access: authenticated", "restricted": "access: restricted"}

# METADATA
# title: Effective access level
# description: public, authenticated or restricted (an unknown or absent value is public, KCP §4.11).
level := value if {
	value := facts.profile.access
	# mutate: equivalent needs_principal looks level up in _why again: an unknown value takes the else branches as "public"
	_why[value]
} else := "public"

# METADATA
# title: Why a principal is needed
# description: The declaration that asks for one; null when none does.
needs_principal := _why[level] if {
	# mutate: equivalent _why["public"] is undefined: the body fails and the else branches apply as when this line fails
	level != "public"
} else := "visibility: requires_auth" if {
	visibility.requires_auth
} else := null

_scope := s if {
	s := facts.profile.auth_scope
	# mutate: equivalent the one finding that reads _scope checks is_string(_scope) itself
	is_string(s)
} else := null

default _scope_held := false

_scope_held if input.action.authorization_context.principal_scopes[_] == _scope

# METADATA
# title: Findings
# custom:
#   requires: [input.action.knowledge.unit]
#   absent: "no authenticated_principal: access_unauthenticated (this rule)"
findings contains finding if {
	# on OPA (the engine mutate runs) an unknown unit's profile is null, so every profile fact below is undefined without
	# this line too; kept for regopy, where not f(undefined) differs (docs/engine-findings.md item 29)
	# mutate: equivalent on OPA, as said above; kept for regopy (docs/engine-findings.md item 29)
	facts.unit_known
	is_string(needs_principal)
	not authenticated
	finding := {
		"code": "access_unauthenticated",
		"rule": "kcp.access.credential",
		"state": "DENY",
		"controls": [],
		"message": concat("", [
			"the unit needs an authenticated principal, for ",
			needs_principal,
			", and the action states none; KCP §4.11 and §4.16",
		]),
		"details": {"missing": "authorization_context.authenticated_principal", "because": needs_principal},
	}
}

# METADATA
# custom:
#   requires: [input.action.knowledge.unit]
#   absent: "no principal_scopes: access_scope_missing (this rule)"
findings contains finding if {
	# on OPA (the engine mutate runs) an unknown unit's profile is null, so every profile fact below is undefined without
	# this line too; kept for regopy, where not f(undefined) differs (docs/engine-findings.md item 29)
	# mutate: equivalent on OPA, as said above; kept for regopy (docs/engine-findings.md item 29)
	facts.unit_known
	level == "restricted"
	# mutate: equivalent with a null scope the message concat fails, so the finding is undefined as when this line fails
	is_string(_scope)
	not _scope_held
	finding := {
		"code": "access_scope_missing",
		"rule": "kcp.access.auth_scope",
		"state": "DENY",
		"controls": [],
		"message": concat("", [
			"access: restricted needs scope ",
			_scope,
			", which the action's principal_scopes lack; KCP §4.11",
		]),
		"details": {"missing": "authorization_context.principal_scopes", "missing_scope": _scope},
	}
}

# METADATA
# title: Applies (the decision plan, compile time)
# description: |
#   Whether this evaluator can find anything (or owe an obligation) for a unit of `profile` and an
#   action of type `task`, from declarations alone. `kcp-opa compile` evaluates it over every
#   profile and every action type the matrix names into the bundle's decision plan; a decision
#   reaches this evaluator only when its plan row names it (kcp.gate.planned). It may
#   over-approximate (a needless visit costs time) but never miss (a miss skips a finding). It
#   reads only its arguments and data.kcp_data, never input. docs/extending.md.
applies(profile, _) if profile.access in {"authenticated", "restricted"}

applies(profile, _) if {
	some row in profile.effective_visibility.cells
	some cell in row
	cell.requires_auth == true
}

applies(profile, _) if profile.effective_visibility.incomplete.requires_auth == true
