# METADATA
# title: Unknown unit
# description: An action that names a project or unit the deployment does not declare is denied.
# custom:
#   evaluator_id: unit_known_check
#   evaluator_version: "1.0.0"
package kcp.evaluators.unit

import rego.v1

import data.kcp.lib.facts

# METADATA
# title: Findings
# description: DENY unknown_unit when the named unit is not in the compiled deployment.
# custom:
#   requires: [input.action.knowledge.project, input.action.knowledge.unit]
findings contains finding if {
	facts.knowledge_bound
	not facts.unit_known
	text1 := concat("", ["unit ", _project_label, "/", _unit_label, " is not declared by the deployment"])
	finding := {
		"code": "unknown_unit",
		"rule": "kcp.unit.known",
		"state": "DENY",
		"controls": [],
		"message": text1,
		"details": {},
	}
}

# Message parts are total (a default when the value is missing): a message built from an
# undefined value would make the whole finding undefined and drop a DENY (fail open). Messages
# use concat, never sprintf over strings (docs/engine-findings.md items 13 and 19).

_project_label := input.action.knowledge.project if is_string(input.action.knowledge.project)

_project_label := "(no project)" if not _project_label_given

_project_label_given if is_string(input.action.knowledge.project)

_unit_label := input.action.knowledge.unit if is_string(input.action.knowledge.unit)

_unit_label := "(not a string)" if not _unit_label_given

_unit_label_given if is_string(input.action.knowledge.unit)
