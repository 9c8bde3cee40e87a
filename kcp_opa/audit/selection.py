"""Which part of a ledger a report or dashboard shows: filters, and a page of bounded size.

A ledger of a year holds millions of entries; a page that lists them all is megabytes no one
reads. A :class:`Selection` narrows the count to a period (each entry by its own timestamp) and
to the decisions of an outcome, agent, model, task type, tenant or id; the entries that belong
to a selected decision (its re-decisions, control results, refusals, receipts, executions) come
with it, and an entry that belongs to no decision is kept only when no decision filter is set.
A :class:`Window` is one page of every list the page shows, newest first, at most ``size`` rows
each; the counts above the lists stay those of the whole selection.

Both come from query parameters (the UI) or options (the CLI) through :func:`parse_selection`,
which refuses anything else with one line naming the parameter and what to give instead.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from kcp_opa.audit.auditor import entry_agent, entry_decision_id
from kcp_opa.audit.tallies import decision_model, redecision_of
from kcp_opa.core.errors import CodedError
from kcp_opa.core.jsonread import JsonObject, mapping
from kcp_opa.models.decision import AuthorizationStatus, RoutingState
from kcp_opa.trail.ledger import read_entries

#: What ``outcome`` may name: a routing state or an authorization status (a decision's final one).
OUTCOMES = tuple(s.value for s in RoutingState) + tuple(s.value for s in AuthorizationStatus)
DEFAULT_PAGE_SIZE = 50
MAX_PAGE_SIZE = 200
_TEXT_FILTERS = ("agent", "model", "task_type", "tenant", "decision")
PARAMETERS = ("since", "until", "outcome", *_TEXT_FILTERS, "page", "per_page")
_MAX_TEXT = 256
_T = TypeVar("_T")


class SelectionError(CodedError):
    """A filter or page parameter that cannot be used; the message names it and what to give."""

    code = "bad_request"


def entry_time(entry: JsonObject) -> dt.datetime | None:
    """An entry's timestamp as an aware datetime (UTC when it names no zone), None when it has none."""
    try:
        moment = dt.datetime.fromisoformat(str(entry.get("timestamp")).replace("Z", "+00:00"))
    except ValueError:
        return None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=dt.UTC)


@dataclass(frozen=True)
class Selection:
    """The filters; None: not filtered by that. ``until`` is exclusive (a date's whole day is included)."""

    since: dt.datetime | None = None
    until: dt.datetime | None = None
    outcome: str | None = None
    agent: str | None = None
    model: str | None = None
    task_type: str | None = None
    tenant: str | None = None
    decision: str | None = None
    #: The parameters as given (for links that keep them), by name.
    given: tuple[tuple[str, str], ...] = ()

    @property
    def narrows_decisions(self) -> bool:
        return any(getattr(self, name) is not None for name in ("outcome", *_TEXT_FILTERS))

    @property
    def active(self) -> bool:
        return bool(self.given)

    def in_period(self, entry: JsonObject) -> bool:
        if self.since is None and self.until is None:
            return True
        moment = entry_time(entry)
        if moment is None:
            return False
        return (self.since is None or moment >= self.since) and (self.until is None or moment < self.until)

    def matching(self, ledger: str | Path) -> set[str] | None:
        """The ids of the decisions every decision filter matches (None: no decision filter is set)."""
        if not self.narrows_decisions:
            return None
        traits: dict[str, dict[str, set[str]]] = {}
        final: dict[str, set[str]] = {}
        aliases: dict[str, str] = {}
        for _, entry in read_entries(ledger):
            if entry.get("type") != "decision" or not isinstance(entry.get("decision_id"), str):
                continue
            decision_id, link = str(entry["decision_id"]), redecision_of(entry)
            if link is not None and link[0] != decision_id:
                aliases.setdefault(decision_id, link[0])  # a re-decision's own id names its decision
                continue
            if decision_id not in traits:
                action = mapping(mapping(entry.get("input")).get("action"))
                traits[decision_id] = {
                    "agent": {entry_agent(entry), str(entry.get("agent_id") or "")},
                    "model": {decision_model(entry)},
                    "task_type": {str(action.get("action_type") or "")},
                    "tenant": {str(action.get("tenant_id") or "")},
                }
            final[decision_id] = {str(entry.get("decision")), str(entry.get("authorization_status"))}
        wanted = aliases.get(self.decision, self.decision) if self.decision is not None else None
        found = set()
        for decision_id, held in traits.items():
            if wanted is not None and decision_id != wanted:
                continue
            if self.outcome is not None and self.outcome not in final[decision_id]:
                continue
            if all(getattr(self, name) is None or getattr(self, name) in held[name] for name in held):
                found.add(decision_id)
        return found

    def keeps(self, entry: JsonObject, matching: set[str] | None) -> bool:
        """Whether ``entry`` is counted: in the period, and (with a decision filter) of a matching decision."""
        if not self.in_period(entry):
            return False
        if matching is None:
            return True
        link = redecision_of(entry)
        return (link[0] if link is not None else entry_decision_id(entry)) in matching


@dataclass(frozen=True)
class Window:
    """Page ``number`` (1 first) of every list, newest first, ``size`` rows each."""

    number: int = 1
    size: int = DEFAULT_PAGE_SIZE

    def rows(self, items: Sequence[_T]) -> list[_T]:
        """This page's rows of ``items`` (held oldest first), newest first."""
        end = len(items) - (self.number - 1) * self.size
        return list(items[max(0, end - self.size) : max(0, end)])[::-1]

    def pages(self, lengths: Iterable[int]) -> int:
        return max(1, math.ceil(max(lengths, default=0) / self.size))

    def check(self, pages: int) -> None:
        if self.number > pages:
            raise SelectionError(f"page={self.number} is past the last page ({pages}): give page=1 to {pages}")


def _when(name: str, text: str) -> dt.datetime:
    try:
        if len(text) == 10:
            day = dt.date.fromisoformat(text)
            moment = dt.datetime(day.year, day.month, day.day, tzinfo=dt.UTC)
            return moment + dt.timedelta(days=1) if name == "until" else moment  # the whole day included
        moment = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except OverflowError:  # the day after 9999-12-31
        raise SelectionError(f"{name}={text[:40]!r} is past the last date: give one before 9999-12-31") from None
    except ValueError:
        raise SelectionError(
            f"{name}={text[:40]!r} is not a date: give YYYY-MM-DD or an RFC 3339 time (2026-12-06T09:00:00Z)"
        ) from None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=dt.UTC)


def _number(name: str, text: str, ceiling: int) -> int:
    if not (text.isascii() and text.isdigit()) or not 1 <= int(text) <= ceiling:
        raise SelectionError(f"{name}={text[:40]!r} is not a whole number from 1 to {ceiling}: give one")
    return int(text)


def parse_selection(params: Iterable[tuple[str, str]]) -> tuple[Selection, Window]:
    """The filters and page from query parameters (an empty value is no filter); SelectionError otherwise."""
    given: dict[str, str] = {}
    for name, value in params:
        if name not in PARAMETERS:
            raise SelectionError(f"unknown parameter {name[:40]!r}: the filters are {', '.join(PARAMETERS)}")
        if name in given:
            raise SelectionError(f"{name} is given twice: give it once")
        if len(value) > _MAX_TEXT or any(ord(c) < 32 or ord(c) == 127 for c in value):
            raise SelectionError(f"{name} is longer than {_MAX_TEXT} characters or holds control characters")
        given[name] = value.strip()
    given = {name: value for name, value in given.items() if value}
    texts = {name: given.get(name) for name in _TEXT_FILTERS}
    since, until = (_when(name, given[name]) if name in given else None for name in ("since", "until"))
    if since and until and until <= since:
        raise SelectionError("until is not after since: give a period that ends after it starts")
    outcome = given.get("outcome")
    if outcome is not None and outcome not in OUTCOMES:
        raise SelectionError(
            f"outcome={outcome[:40]!r} is not a decision state or status: give one of {', '.join(OUTCOMES)}"
        )
    window = Window(
        _number("page", given["page"], 10**9) if "page" in given else 1,
        _number("per_page", given["per_page"], MAX_PAGE_SIZE) if "per_page" in given else DEFAULT_PAGE_SIZE,
    )
    kept = tuple((name, given[name]) for name in PARAMETERS if name in given and name not in ("page", "per_page"))
    return Selection(since=since, until=until, outcome=outcome, given=kept, **texts), window


def query_string(selection: Selection, window: Window, page: int) -> str:
    """The query that shows ``page`` with the same filters and page size (URL-encoded, to be HTML-escaped)."""
    from urllib.parse import urlencode

    sized = [("per_page", str(window.size))] if window.size != DEFAULT_PAGE_SIZE else []
    return "?" + urlencode([*selection.given, *sized, ("page", str(page))])
