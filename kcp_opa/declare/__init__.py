"""Stage 1, declare: read and validate what a deployment declares.

Takes KCP manifests (``knowledge.yaml``) and a delegation matrix as YAML files; gives a typed
``Manifest`` and ``DelegationMatrix``, the effective unit (inheritance resolved, each value with
its source), and diagnostics with file:line:column for every finding. Nothing here knows Rego.
"""
