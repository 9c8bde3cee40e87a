# The hr-sick-leave deployment's own Rego test: its Art. 9(2)(b) decisions (health data processed
# under employment law: a sick note is recorded only with the HR manager's approval, the agent
# never reads health data on its own, the restricted unit needs the hr:health scope), pinned on
# the evaluators that make them, on regopy and OPA. Run it with the policies it tests:
#   kcp-opa test policies tests/deployments/hr-sick-leave --run hr_sick_leave --rego-only
# `_compiled` is this deployment's compiled data (kcp_data's units, profiles and tasks from
# `kcp-opa compile knowledge.yaml --matrix matrix.yaml`); tests/test_hr_sick_leave.py fails, and
# prints the fresh value, when it differs from a fresh compile.
package hr_sick_leave_test

import rego.v1

import data.kcp.evaluators.access
import data.kcp.evaluators.matrix

_compiled := {
	"profiles": [
		{
			"access": "authenticated",
			"auth_scope": null,
			"authority": {
				"actions": {
					"execute": "denied",
					"modify": "denied",
					"read": "initiative",
					"share_externally": "denied",
					"summarize": "initiative"
				},
				"declared": false
			},
			"compliance": {
				"data_categories": [],
				"data_residency": [
					"EU"
				],
				"declared_fields": null,
				"legal_basis": "legal_obligation",
				"residency_places": {
					"AT": true,
					"BE": true,
					"BG": true,
					"CY": true,
					"CZ": true,
					"DE": true,
					"DK": true,
					"EE": true,
					"ES": true,
					"EU": true,
					"FI": true,
					"FR": true,
					"GR": true,
					"HR": true,
					"HU": true,
					"IE": true,
					"IT": true,
					"LT": true,
					"LU": true,
					"LV": true,
					"MT": true,
					"NL": true,
					"PL": true,
					"PT": true,
					"RO": true,
					"SE": true,
					"SI": true,
					"SK": true
				},
				"restrictions": [
					"audit-required"
				]
			},
			"delegation": {
				"audit_chain": false,
				"human_in_the_loop": {
					"approval_mechanism": null,
					"required": false
				},
				"max_depth": null,
				"require_capability_attenuation": false
			},
			"deprecated": false,
			"effective_visibility": {
				"cells": {
					"": {
						"": {
							"condition": null,
							"requires_auth": false,
							"sensitivity": "internal",
							"source": "flat sensitivity (no visibility block)"
						}
					}
				},
				"incomplete": {
					"condition": null,
					"requires_auth": false,
					"sensitivity": "internal",
					"source": "flat sensitivity (no visibility block)"
				},
				"needs": []
			},
			"freshness": {
				"max_age_days": 365,
				"on_stale": "warn",
				"review_contact": null
			},
			"not_for": [],
			"not_for_strict": false,
			"rate_limits": null,
			"sensitivity": "internal",
			"superseded_by": [],
			"temporal": null,
			"trust": {
				"agent_must_log": true,
				"require_trace_context": false
			},
			"visibility": null
		},
		{
			"access": "restricted",
			"auth_scope": "hr:health",
			"authority": {
				"actions": {
					"execute": "denied",
					"modify": "denied",
					"read": "initiative",
					"share_externally": "denied",
					"summarize": "initiative"
				},
				"declared": false
			},
			"compliance": {
				"data_categories": [
					"health",
					"personal"
				],
				"data_residency": [
					"EU"
				],
				"declared_fields": [
					"certificate_reference",
					"employee_id",
					"end_date",
					"start_date"
				],
				"legal_basis": "legal_obligation",
				"residency_places": {
					"AT": true,
					"BE": true,
					"BG": true,
					"CY": true,
					"CZ": true,
					"DE": true,
					"DK": true,
					"EE": true,
					"ES": true,
					"EU": true,
					"FI": true,
					"FR": true,
					"GR": true,
					"HR": true,
					"HU": true,
					"IE": true,
					"IT": true,
					"LT": true,
					"LU": true,
					"LV": true,
					"MT": true,
					"NL": true,
					"PL": true,
					"PT": true,
					"RO": true,
					"SE": true,
					"SI": true,
					"SK": true
				},
				"restrictions": [
					"audit-required"
				]
			},
			"delegation": {
				"audit_chain": false,
				"human_in_the_loop": {
					"approval_mechanism": null,
					"required": false
				},
				"max_depth": null,
				"require_capability_attenuation": false
			},
			"deprecated": false,
			"effective_visibility": {
				"cells": {
					"": {
						"": {
							"condition": null,
							"requires_auth": false,
							"sensitivity": "restricted",
							"source": "flat sensitivity (no visibility block)"
						}
					}
				},
				"incomplete": {
					"condition": null,
					"requires_auth": false,
					"sensitivity": "restricted",
					"source": "flat sensitivity (no visibility block)"
				},
				"needs": []
			},
			"freshness": {
				"max_age_days": 365,
				"on_stale": "warn",
				"review_contact": null
			},
			"not_for": [],
			"not_for_strict": false,
			"rate_limits": null,
			"sensitivity": "restricted",
			"superseded_by": [],
			"temporal": null,
			"trust": {
				"agent_must_log": true,
				"require_trace_context": false
			},
			"visibility": null
		}
	],
	"tasks": {
		"count": 2,
		"depth": 0,
		"slots": {
			"read": {
				"data_categories": {
					"health": "forbidden",
					"personal": "autonomous"
				},
				"sensitivity": {
					"internal": "autonomous",
					"restricted": "forbidden"
				}
			},
			"record_sick_note": {
				"data_categories": {
					"health": "approve",
					"personal": "approve"
				},
				"sensitivity": {
					"restricted": "approve"
				}
			}
		}
	},
	"units": {
		"count": 2,
		"depth": 0,
		"slots": {
			"hr-sick-leave": {
				"sick-leave-policy": {
					"profile": 0,
					"validated": "2026-11-20",
					"validated_epoch_day": 20777
				},
				"sick-notes": {
					"profile": 1,
					"validated": "2026-11-20",
					"validated_epoch_day": 20777
				}
			}
		}
	}
}

_sick_notes := {"project": "hr-sick-leave", "unit": "sick-notes", "fields_read": ["employee_id", "start_date"]}

_policy_unit := {"project": "hr-sick-leave", "unit": "sick-leave-policy", "fields_read": []}

# Recording a sick note (health and personal data, restricted) needs independent human approval:
# Art. 9(2)(b) allows the processing, the matrix keeps a human in the loop for it.
test_hr_sick_leave_recording_a_sick_note_needs_human_approval if {
	units := _compiled.units
	profiles := _compiled.profiles
	cells := _compiled.tasks
	k := _sick_notes
	found := {[f.code, f.state, f.controls] | some f in matrix.findings} with input.action.knowledge as k
		with input.action.action_type as "record_sick_note"
		with data.kcp_data.units as units with data.kcp_data.profiles as profiles
		with data.kcp_data.tasks as cells
	found == {["matrix_approve", "HUMAN_APPROVAL", ["independent_human_approval"]]}
}

# Every cell of the sick-notes unit the record touches is at approve: health, personal, restricted.
test_hr_sick_leave_every_cell_of_a_record_is_approve if {
	units := _compiled.units
	profiles := _compiled.profiles
	cells := _compiled.tasks
	k := _sick_notes
	needed := matrix.needed with input.action.knowledge as k
		with input.action.action_type as "record_sick_note"
		with data.kcp_data.units as units with data.kcp_data.profiles as profiles
		with data.kcp_data.tasks as cells
	needed == {["data_categories", "health"], ["data_categories", "personal"], ["sensitivity", "restricted"]}
}

# The agent never reads health data on its own: the health and restricted cells of read forbid it.
test_hr_sick_leave_reading_health_data_is_denied if {
	units := _compiled.units
	profiles := _compiled.profiles
	cells := _compiled.tasks
	k := _sick_notes
	found := {[f.code, f.state] | some f in matrix.findings} with input.action.knowledge as k
		with input.action.action_type as "read"
		with data.kcp_data.units as units with data.kcp_data.profiles as profiles
		with data.kcp_data.tasks as cells
	found == {["matrix_forbidden", "DENY"]}
}

# The sick-leave policy holds no health data: reading it is autonomous.
test_hr_sick_leave_reading_the_policy_is_autonomous if {
	units := _compiled.units
	profiles := _compiled.profiles
	cells := _compiled.tasks
	k := _policy_unit
	count(matrix.findings) == 0 with input.action.knowledge as k
		with input.action.action_type as "read"
		with data.kcp_data.units as units with data.kcp_data.profiles as profiles
		with data.kcp_data.tasks as cells
}

# A sick note is recorded on the sick-notes unit only: the matrix has no record_sick_note level for
# the internal policy unit, so that combination is not covered (DENY).
test_hr_sick_leave_recording_against_the_policy_unit_is_not_covered if {
	units := _compiled.units
	profiles := _compiled.profiles
	cells := _compiled.tasks
	k := _policy_unit
	some f in matrix.findings with input.action.knowledge as k
		with input.action.action_type as "record_sick_note"
		with data.kcp_data.units as units with data.kcp_data.profiles as profiles
		with data.kcp_data.tasks as cells
	f.code == "matrix_not_covered"
	f.state == "DENY"
	f.details.value == "internal"
}

# The restricted unit needs the hr:health scope: without it, DENY access_scope_missing.
test_hr_sick_leave_health_data_needs_the_hr_health_scope if {
	units := _compiled.units
	profiles := _compiled.profiles
	k := _sick_notes
	auth := {"authenticated_principal": "emp_042", "principal_scopes": ["hr:leave"]}
	some f in access.findings with input.action.knowledge as k
		with input.action.authorization_context as auth
		with data.kcp_data.units as units with data.kcp_data.profiles as profiles
	f.code == "access_scope_missing"
	f.state == "DENY"
}

test_hr_sick_leave_the_scope_holder_passes_the_access_check if {
	units := _compiled.units
	profiles := _compiled.profiles
	k := _sick_notes
	auth := {"authenticated_principal": "emp_042", "principal_scopes": ["hr:health"]}
	count(access.findings) == 0 with input.action.knowledge as k
		with input.action.authorization_context as auth
		with data.kcp_data.units as units with data.kcp_data.profiles as profiles
}
