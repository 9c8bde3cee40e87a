"""A fleet reload logs what every worker said, each line once, and never nothing.

The supervisor's side of the reload, over real control channels (socket pairs) whose peers answer
as a worker does, in the cases a real fleet cannot be made to hit on demand: one worker alone
failing to audit its reload, one refusing while the other reloads, one answering without a word
(a timeout, a closed channel). On a real fleet the same code runs (test_workers_say.py).
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from kcp_opa.core.jsonread import JsonDict
from kcp_opa.service.config import ServiceConfig
from kcp_opa.service.fleet import Channel
from kcp_opa.service.workers import Supervisor

RELOADED: JsonDict = {"event": "service_reloaded", "level": "info", "via": "sighup", "to_sha256": "s"}
NOT_AUDITED: JsonDict = {"event": "reload_not_audited", "level": "error", "error": "ledger write failed"}
REFUSED: JsonDict = {"event": "reload_refused", "level": "error", "error": "trust registry malformed"}


class _Process:
    """What the supervisor asks of a worker's process while reloading (only whether it runs)."""

    pid = 4242

    def poll(self) -> None:
        return None

    def send_signal(self, _: object) -> None:
        return None


@pytest.fixture
def fleet() -> Iterator[tuple[Supervisor, list[JsonDict]]]:
    """Two ready workers whose answers to ``reload`` are the dicts in ``answers`` (by index)."""
    ours, theirs = socket.socketpair()
    supervisor = Supervisor(ServiceConfig(bundle=Path("unused.tar.gz")), 2, ours)
    answers: list[JsonDict] = [{}, {}]
    peers = []
    for child in supervisor.children:
        left, right = socket.socketpair()
        peers.append(Channel(right, lambda _, i=child.index: dict(answers[i])).start())
        child.channel, child.process = Channel(left, lambda _: {"ok": True}).start(), _Process()
        child.ready.set()
    yield supervisor, answers
    for channel in [*peers, *(c.channel for c in supervisor.children if c.channel is not None)]:
        channel.close()
    ours.close()
    theirs.close()


def _reload(supervisor: Supervisor) -> tuple[JsonDict, list[tuple[str, str]]]:
    with capture_logs() as logs:
        answer = supervisor.reload_all(None, None, "sighup")
    return answer, [(str(line["event"]), str(line["log_level"])) for line in logs]


def test_one_worker_s_own_error_is_logged_beside_the_line_both_gave(
    fleet: tuple[Supervisor, list[JsonDict]],
) -> None:
    supervisor, answers = fleet
    answers[0].update(ok=True, sha256="s", lines=[RELOADED])
    answers[1].update(ok=True, sha256="s", lines=[RELOADED, NOT_AUDITED])
    answer, logged = _reload(supervisor)
    assert answer["ok"] is True
    assert logged == [("service_reloaded", "info"), ("reload_not_audited", "error")]  # each once


def test_a_worker_refusing_while_the_other_reloads_is_logged_as_refused(
    fleet: tuple[Supervisor, list[JsonDict]],
) -> None:
    supervisor, answers = fleet
    answers[0].update(ok=True, sha256="s", lines=[RELOADED])
    answers[1].update(ok=False, error="reload refused: trust registry malformed", lines=[REFUSED])
    answer, logged = _reload(supervisor)
    assert answer["ok"] is False
    assert logged == [("service_reloaded", "info"), ("reload_refused", "error")]


def test_a_worker_failing_without_a_word_still_gets_a_refused_line(
    fleet: tuple[Supervisor, list[JsonDict]],
) -> None:
    supervisor, answers = fleet
    for answer in answers:  # what Channel.request answers on a timeout: no lines held
        answer.update(ok=False, error="no answer within 60 s")
    answer, logged = _reload(supervisor)
    assert answer["ok"] is False and logged == [("reload_refused", "error")] * 2  # one per silent worker


def test_a_line_said_at_the_last_load_is_news_again_at_a_reload(
    fleet: tuple[Supervisor, list[JsonDict]],
) -> None:
    supervisor, answers = fleet
    for answer in answers:
        answer.update(ok=True, sha256="s", lines=[RELOADED])
    assert _reload(supervisor)[1] == [("service_reloaded", "info")]
    assert _reload(supervisor)[1] == [("service_reloaded", "info")]  # the second reload, said again


def test_the_supervisor_never_waits_on_a_reload_it_cannot_ask(fleet: tuple[Supervisor, list[JsonDict]]) -> None:
    supervisor, _ = fleet
    for child in supervisor.children:
        child.ready.clear()
    answer, logged = _reload(supervisor)
    assert answer == {"ok": False, "error": "no worker is ready to reload"} and logged == [("reload_refused", "error")]
