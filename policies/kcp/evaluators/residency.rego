# METADATA
# title: Data residency and cross-border transfer
# description: |
#   The deployment region must lie inside the unit's data_residency; under no-cross-border
#   the target's country or region must too. "global" admits every region and EEA admits
#   EU. A residency the action cannot be checked against (no deployment_region) denies.
# custom:
#   evaluator_id: residency_check
#   evaluator_version: "1.0.0"
package kcp.evaluators.residency

import rego.v1

import data.kcp.lib.facts

evaluator := {"id": "residency_check", "version": "1.0.0"}

_regions := facts.unit.compliance.data_residency

# METADATA
# title: Region admitted by a residency list
admitted(region, regions) if region in regions

admitted(_, regions) if "global" in regions

admitted("EU", regions) if "EEA" in regions

# METADATA
# title: Findings
findings contains {
	"code": "residency_violation",
	"rule": "kcp.compliance.data_residency",
	"evaluator_id": "residency_check",
	"evaluator_version": "1.0.0",
	"state": "DENY",
	"controls": [],
	"message": text1,
	"details": {"region": input.action.runtime.deployment_region, "data_residency": _regions},
} if {
	is_array(_regions)
	is_string(input.action.runtime.deployment_region)
	not admitted(input.action.runtime.deployment_region, _regions)
	text1 := sprintf("deployment region %v is outside data_residency %v", [input.action.runtime.deployment_region, _regions])
}

findings contains {
	"code": "residency_unverifiable",
	"rule": "kcp.compliance.data_residency",
	"evaluator_id": "residency_check",
	"evaluator_version": "1.0.0",
	"state": "DENY",
	"controls": [],
	"message": "the unit declares data_residency but the action gives no runtime.deployment_region",
	"details": {"data_residency": _regions},
} if {
	is_array(_regions)
	not _region_given
}

# `not is_string(undefined)` differs between the engines: test a named rule instead.
_region_given if is_string(input.action.runtime.deployment_region)

findings contains {
	"code": "cross_border_transfer",
	"rule": "kcp.restrictions.no-cross-border",
	"evaluator_id": "residency_check",
	"evaluator_version": "1.0.0",
	"state": "DENY",
	"controls": [],
	"message": text1,
	"details": {"target": _target_place, "data_residency": _regions},
} if {
	facts.restricted("no-cross-border")
	is_array(_regions)
	not admitted(_target_place, _regions)
	text1 := sprintf("no-cross-border: target %v is outside data_residency %v", [_target_place, _regions])
}

_target_place := input.action.target.country

_target_place := input.action.target.region if not input.action.target.country
