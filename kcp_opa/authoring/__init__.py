"""Authoring tools for compliance engineers: test and check the policies they edit.

Takes ``policies/`` and decision cases; gives Rego test runs on both engines (``regotest``),
decision cases loaded and checked (``cases``, ``caserun``), reports with coverage and JUnit XML
(``testreport``) and the static checks behind ``kcp-opa check`` (``policycheck``).
"""
