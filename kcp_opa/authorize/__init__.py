"""Stage 4, authorize: from a decision that needs controls to a signed one-time receipt.

Takes a typed decision and control evidence; gives the control state (``controls``), receipts
signed over the frozen action's hash and verified once (``receipts``), and the SQLite stores that
make receipts one-time and executions idempotent (``store``).
"""
