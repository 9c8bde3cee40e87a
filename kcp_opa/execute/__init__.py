"""Stage 5, execute: run an authorized action at most once.

Takes a receipt and the final action; verifies and consumes the receipt, claims the idempotency
key, runs the handler and records the outcome in the audit trail (``executor``).
"""
