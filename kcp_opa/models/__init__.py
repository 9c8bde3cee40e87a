"""Typed models of the gate contract that more than one stage reads.

Gives the typed decision (``decision``): the gate builds it, the audit trail archives it, the
authorize stage reads it, the decision cases compare against it. It sits below all of them so that
the audit trail, which every stage writes to, never imports a stage above it.
"""
