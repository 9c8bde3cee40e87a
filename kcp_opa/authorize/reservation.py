"""Issue a receipt and reserve its value transfer against the budgets, in one transaction.

Under the counter store's write lock: the counts are read afresh, the decision re-derived on
them (the policy decides, budget.rego), the receipt signed only if it still stands, and the
transfer reserved. N desks in N processes issuing against a budget that allows k therefore sign
at most k receipts; the rest are refused with the budget's reason code. The reservation is
committed when the receipt is consumed (the executor store, same transaction), released when
the execution fails or loses its claim, and stops counting when the receipt expires unused.
"""

from __future__ import annotations

import datetime as dt
from typing import Protocol, TypeVar

from kcp_opa.authorize.documents import Receipt
from kcp_opa.context.counting import StoreCounters, transfer_of
from kcp_opa.core.errors import ReceiptIssueError
from kcp_opa.core.jsonread import JsonObject
from kcp_opa.core.signing import Signer
from kcp_opa.decide.gate import DecisionInput, decision_time
from kcp_opa.models.decision import Decision
from kcp_opa.stores.protocols import CounterView
from kcp_opa.stores.storedtypes import Transfer


class Record(Protocol):
    """What a reservation reads of a control record (controls.GateDecision; a Protocol keeps the import one-way)."""

    @property
    def action(self) -> JsonObject: ...

    @property
    def prepared(self) -> DecisionInput: ...

    @property
    def decision(self) -> Decision: ...


R = TypeVar("R", bound=Record)


class Desk(Protocol[R]):
    """What a reservation asks of the control desk (controls.ControlDesk)."""

    def rederive_for_issue(self, record: R, counters: JsonObject | None = None) -> R: ...

    def issue_rederived(
        self, rederived: R, key: Signer, *, ttl_seconds: int | None = None, now: dt.datetime | None = None
    ) -> Receipt: ...


#: Reason codes that make a refused issue a budget refusal (the code the caller sees).
BUDGET_REASONS = ("budget_exhausted", "velocity_exceeded", "budget_approval_required", "rate_limited")


def issue_reserved(
    desk: Desk[R],
    counting: StoreCounters,
    record: R,
    key: Signer,
    *,
    ttl_seconds: int | None = None,
    now: dt.datetime | None = None,
) -> Receipt:
    moment = decision_time(now)
    kept = record.prepared.document["context"].get("counters") or {}

    def work(view: CounterView) -> tuple[Receipt, Transfer | None]:
        fresh = {**kept, **counting.history(view, record.action, now=moment)}
        rederived = desk.rederive_for_issue(record, fresh)
        try:
            receipt = desk.issue_rederived(rederived, key, ttl_seconds=ttl_seconds, now=moment)
        except ReceiptIssueError as exc:
            reasons = [code for code in BUDGET_REASONS if code in rederived.decision.reason_codes]
            if reasons:
                raise ReceiptIssueError(f"{exc} ({', '.join(reasons)} on the gate's counts)", reasons[0]) from None
            raise
        return receipt, transfer_of(record.action, receipt.to_dict(), now=moment)

    return counting.store.reserving(work, counting.reservation_keys(record.action))
