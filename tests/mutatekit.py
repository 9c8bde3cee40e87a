"""A two-rule policy set for the ``kcp-opa mutate`` tests: one rule pinned by its tests, one not."""

from __future__ import annotations

from pathlib import Path

POLICY = """package kcp.demo

import rego.v1

default allowed := false

allowed if {
\tinput.amount < 100
\tinput.currency == "EUR"
}

label := "DENY" if input.amount >= 1000 # a "quoted == string" and a # comment stay as they are

kinds contains "small" if input.amount < 10

kinds contains "eur" if input.currency == "EUR"
"""
TESTS = """package kcp.demo_test

import rego.v1

import data.kcp.demo

test_small_eur_allowed if demo.allowed with input as {"amount": 5, "currency": "EUR"}

test_large_refused if not demo.allowed with input as {"amount": 500, "currency": "EUR"}

test_usd_refused if not demo.allowed with input as {"amount": 5, "currency": "USD"}

test_boundary_refused if not demo.allowed with input as {"amount": 100, "currency": "EUR"}
"""


def demo_policies(root: Path, policy: str = POLICY) -> Path:
    """``root/policies`` (the policy and its tests) and an empty ``root/cases``; returns ``root``."""
    (root / "policies" / "kcp").mkdir(parents=True)
    (root / "policies" / "kcp" / "demo.rego").write_text(policy)
    (root / "policies" / "kcp" / "demo_test.rego").write_text(TESTS)
    (root / "cases").mkdir()
    return root
