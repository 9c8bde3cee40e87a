"""The audit trail: the hash-chained ledger every later stage writes to.

Takes events (decisions, control evidence, receipts, executions, failures); gives ledger entries
that chain by hash (``ledger``) and the builder that turns a typed decision into an OPA-style
decision-log entry (``entries``). It sits below decide and authorize: those stages write here,
and nothing here imports them.
"""
