"""Stage 6, audit: the auditor's tools on top of the ledger, and the ROPA.

Takes a ledger file and archived bundles; verifies the chain, exports a decision with the exact
``opa eval`` command that reproduces it, replays archived decisions on both engines, queries
entries (``auditor``), and builds the GDPR record of processing from the manifests (``ropa``).
"""
