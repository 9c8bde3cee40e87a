"""The counts the gate derives from its own history, for ``input.context.counters`` (class gate).

What is counted follows the bundle: the matrix's budgets and velocity rules
(``kcp_data/matrix/parameters``) and the requests per unit and principal (KCP rate limits, the
windows ``requests_per_minute`` and ``requests_per_hour`` rolling, ``requests_per_day`` the UTC
calendar day). Python only counts; whether a budget applies and whether a count is past its
limit is the policy's (``policies/kcp/evaluators/budget.rego``). The keys below mirror the
policy's ``budget.key``; a count under another key is ``context_missing`` there, never used.
Shape: docs/budgets.md.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import replace

from kcp_opa.context import ContextSources
from kcp_opa.core.errors import BundleError
from kcp_opa.core.jsonread import JsonDict, JsonObject, integer, text
from kcp_opa.declare.parameters import MatrixParameters, ParametersError, compiled_parameters
from kcp_opa.stores.protocols import CounterStore, CounterView
from kcp_opa.stores.sqlite.base import utc_stamp
from kcp_opa.stores.storedtypes import ReservationKey, Transfer

RATE_WINDOWS = {"requests_per_minute": 60, "requests_per_hour": 3600}
_PER_COLUMN = {"tenant": "tenant_id", "agent": "agent_id", "task_type": "task_type", "beneficiary": "beneficiary"}


def beneficiary(action: JsonObject) -> str | None:
    """The account fingerprint, else the reference, of the target (as budget.rego's ``beneficiary``)."""
    target = action.get("target")
    if not isinstance(target, Mapping):
        return None
    return text(target.get("account_fingerprint")) or text(target.get("reference"))


def principal(action: JsonObject) -> str | None:
    """The authenticated principal when the gate bound one, else the agent (as budget.rego's ``principal``)."""
    context = action.get("authorization_context")
    bound = context.get("authenticated_principal") if isinstance(context, Mapping) else None
    return bound if isinstance(bound, str) and bound else text(action.get("agent_id"))


def key(per: str, action: JsonObject) -> str | None:
    """The key a budget or velocity rule counted ``per`` tenant, agent, task type or beneficiary
    counts ``action`` under (as budget.rego's ``key``); None when the action has none."""
    if per == "beneficiary":
        tenant, paid = text(action.get("tenant_id")), beneficiary(action)
        return f"{tenant}/{paid}" if tenant is not None and paid is not None else None
    field = {"tenant": "tenant_id", "agent": "agent_id", "task_type": "action_type"}.get(per)
    return text(action.get(field)) if field else None


def _filter_value(per: str, action: JsonObject) -> str | None:
    return beneficiary(action) if per == "beneficiary" else key(per, action)


#: The receipt whose own reservation the counts leave out, for the re-decision at execution
#: (set by :func:`excluding`; per thread and task, so concurrent decisions are unaffected).
_EXCLUDED: ContextVar[str | None] = ContextVar("kcp_opa_excluded_receipt", default=None)


@contextmanager
def excluding(receipt_id: str | None) -> Iterator[None]:
    """Count everything but ``receipt_id``'s own reservation while inside: the re-decision at
    execution asks whether this receipt's transfer still fits beside every other one, and the
    reservation made when it was issued is that very transfer (counted once, as the amount)."""
    token = _EXCLUDED.set(receipt_id)
    try:
        yield
    finally:
        _EXCLUDED.reset(token)


class StoreCounters:
    """The context stage's :class:`~kcp_opa.context.CounterSource` over a
    :class:`~kcp_opa.stores.protocols.CounterStore` (``ContextSources.counters``).

    ``parameters`` are the bundle's matrix parameters, whose budgets and velocity rules it counts,
    read by :class:`~kcp_opa.declare.parameters.MatrixParameters` (a wrong shape: BundleError).
    """

    def __init__(self, store: CounterStore, parameters: JsonObject) -> None:
        self.store = store
        self.parameters = parameters
        typed = _typed(lambda: MatrixParameters.from_dict(parameters, "kcp_data/matrix/parameters"))
        self.budgets, self.velocity = list(typed.budgets), list(typed.velocity)
        # The same store counting for other bundles' parameters (held with them, so ids stay theirs).
        self._rebound: dict[int, tuple[JsonObject, StoreCounters]] = {}

    @classmethod
    def for_bundle(cls, store: CounterStore, data: JsonObject) -> StoreCounters:
        """Count what the bundle's matrix declares (``data`` is the bundle's data document)."""
        return cls(store, matrix_parameters(data))

    @staticmethod
    def bound_to(sources: ContextSources | None, parameters: JsonObject) -> ContextSources | None:
        """``sources`` counting what the deciding bundle declares (``parameters``, in the form the
        bundle carries them, read once when it was loaded): a reloaded bundle's budgets and
        velocity rules are counted from its first decision, not the ones the gate started with.
        A host's own counter source is left as it is."""
        counters = sources.counters if sources is not None else None
        if sources is None or not isinstance(counters, StoreCounters) or parameters is counters.parameters:
            return sources
        return replace(sources, counters=counters.rebound(parameters))

    def rebound(self, parameters: JsonObject) -> StoreCounters:
        """This store counting ``parameters``: built once per bundle, not once per decision."""
        held = self._rebound.get(id(parameters))
        if held is not None and held[0] is parameters:
            return held[1]
        counters = StoreCounters(self.store, parameters)
        if len(self._rebound) >= 8:  # bundles come and go (reloads): keep the recent ones
            self._rebound.pop(next(iter(self._rebound)))
        self._rebound[id(parameters)] = (parameters, counters)
        return counters

    def counters(self, action: JsonObject, *, now: dt.datetime) -> JsonDict:
        out = self.store.read(lambda view: self.history(view, action, now=now))
        rate = self.rate(action, now=now)
        if rate is not None:
            out["rate"] = rate
        return out

    def rate(self, action: JsonObject, *, now: dt.datetime) -> JsonDict | None:
        """Record this request on its unit and count it per window (None for an action on no unit)."""
        knowledge = action.get("knowledge")
        unit = text(knowledge.get("unit")) if isinstance(knowledge, Mapping) else None
        who = principal(action)
        if unit is None or who is None or not isinstance(knowledge, Mapping):
            return None
        unit_key = f"{text(knowledge.get('project')) or ''}/{unit}"
        day = now.astimezone(dt.UTC).replace(hour=0, minute=0, second=0, microsecond=0)
        starts = {name: now - dt.timedelta(seconds=seconds) for name, seconds in RATE_WINDOWS.items()}
        starts["requests_per_day"] = day - dt.timedelta(microseconds=1)
        counts = self.store.count_request(unit_key, who, utc_stamp(now), [utc_stamp(s) for s in starts.values()])
        return {"unit": unit_key, "principal": who, **dict(zip(starts, counts, strict=True))}

    def reservation_keys(self, action: JsonObject) -> list[ReservationKey]:
        """The keys ``action``'s transfer is filed under (as :func:`transfer_of` files them), each
        marked read when these parameters count under it: what a store locks for its reservation."""
        read = {str(b["per"]) for b in self.budgets} | ({"tenant"} if self.velocity else set())
        return [
            ReservationKey(column, str(action.get(field)), per in read)
            for per, column, field in (
                ("tenant", "tenant_id", "tenant_id"),
                ("agent", "agent_id", "agent_id"),
                ("task_type", "task_type", "action_type"),
            )
        ]

    def history(self, view: CounterView, action: JsonObject, *, now: dt.datetime) -> JsonDict:
        """Budgets, velocity and beneficiary counts for ``action`` (no request recorded)."""
        stamp, left_out = utc_stamp(now), _EXCLUDED.get()
        budgets: JsonDict = {}
        for b in self.budgets:
            counted = key(str(b["per"]), action)
            if counted is None:
                continue
            since = _window_start(b, now)
            types = b.get("task_types")
            totals = view.transfers(
                currency=str(b["currency"]),
                since=since,
                now=stamp,
                where=[(_PER_COLUMN[str(b["per"])], counted)],
                task_types=list(types) if isinstance(types, list) else None,
                excluding=left_out,
            )
            budgets[str(b["id"])] = {
                "key": counted,
                "spent_minor": totals.committed_minor,
                "reserved_minor": totals.reserved_minor,
            }
        velocity: JsonDict = {}
        tenant = text(action.get("tenant_id"))
        for v in self.velocity:
            per = str(v["per"])
            counted, value = key(per, action), _filter_value(per, action)
            if counted is None or value is None or tenant is None:
                continue
            where = [("tenant_id", tenant)] + ([("beneficiary", value)] if per == "beneficiary" else [])
            since = _window_start(v, now)
            totals = view.transfers(
                currency=str(v["currency"]), since=since, now=stamp, where=where, excluding=left_out
            )
            velocity[str(v["id"])] = {
                "key": counted,
                "count": totals.count,
                "sum_minor": totals.committed_minor + totals.reserved_minor,
            }
        out: JsonDict = {"source": "gate", "budgets": budgets, "velocity": velocity}
        paid = beneficiary(action)
        if tenant is not None and paid is not None:
            out["beneficiary"] = {"key": f"{tenant}/{paid}", "prior_payments": view.prior_payments(tenant, paid)}
        return out


def _window_start(rule: JsonObject, now: dt.datetime) -> str:
    """When ``rule``'s window ending ``now`` starts (``window_seconds``: an integer, by the matrix schema)."""
    if (seconds := integer(rule["window_seconds"])) is None:  # refused, never counted as an empty window
        raise BundleError(f"window_seconds of {rule.get('id')!r} is not an integer")
    return utc_stamp(now - dt.timedelta(seconds=seconds))


def matrix_parameters(data: JsonObject) -> JsonObject:
    """The parameters a bundle's matrix declares (``data``: its data document), normalised as the
    bundle carries them (kcp_opa.declare.parameters)."""
    return _typed(lambda: compiled_parameters(data)).to_dict()


def _typed(read: Callable[[], MatrixParameters]) -> MatrixParameters:
    """The parameters ``read`` gives; a part of the wrong shape is a BundleError: read as empty,
    it would count nothing, and the budgets it holds would go uncounted."""
    try:
        return read()
    except ParametersError as exc:
        raise BundleError(f"{exc}: its budgets cannot be counted") from None


def transfer_of(action: JsonObject, receipt: JsonObject, *, now: dt.datetime) -> Transfer | None:
    """The value transfer a receipt authorizes (None when the action moves no money)."""
    amount = action.get("amount")
    value = amount.get("value_minor") if isinstance(amount, Mapping) else None
    currency = amount.get("currency") if isinstance(amount, Mapping) else None
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0 or not isinstance(currency, str):
        return None
    expires = dt.datetime.strptime(str(receipt["expires_at"]), "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=dt.UTC)
    return Transfer(
        receipt_id=str(receipt["receipt_id"]),
        tenant_id=str(action.get("tenant_id")),
        agent_id=str(action.get("agent_id")),
        task_type=str(action.get("action_type")),
        beneficiary=beneficiary(action),
        currency=currency,
        amount_minor=value,
        reserved_at=utc_stamp(now),
        expires_at=utc_stamp(expires),
    )
