"""The payment handler the UI tests' server runs (``--handlers``: {"pay": "uihandlers:pay"})."""

from __future__ import annotations

from typing import Any


def pay(action: dict[str, Any]) -> dict[str, Any]:
    return {"payment_ref": f"PAY-{action['idempotency_key']}", "amount": action["amount"]}
