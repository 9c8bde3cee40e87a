"""The cycle collector's pause around bulk parsing: on inside, restored after, whatever happens."""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator

import pytest

from kcp_opa.core.bulk import collector_paused


@pytest.fixture(autouse=True)
def _collector_on() -> Iterator[None]:
    gc.enable()
    yield
    gc.enable()


def test_the_collector_is_paused_inside_and_back_on_after() -> None:
    with collector_paused():
        assert not gc.isenabled()
    assert gc.isenabled()


def test_a_nested_pause_switches_it_back_on_only_at_the_outermost_end() -> None:
    with collector_paused():
        with collector_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()


def test_a_collector_the_host_switched_off_stays_off() -> None:
    gc.disable()
    with collector_paused():
        pass
    assert not gc.isenabled()


def test_an_exception_inside_still_switches_it_back_on() -> None:
    @collector_paused()
    def fails() -> None:
        raise ValueError("bad input")

    with pytest.raises(ValueError):
        fails()
    assert gc.isenabled()


def test_overlapping_pauses_in_two_threads_end_with_the_collector_on() -> None:
    inside, release = threading.Event(), threading.Event()

    def hold() -> None:
        with collector_paused():
            inside.set()
            release.wait(10)

    worker = threading.Thread(target=hold)
    worker.start()
    inside.wait(10)
    with collector_paused():
        pass
    assert not gc.isenabled()  # the other thread's pause is still on
    release.set()
    worker.join(10)
    assert gc.isenabled()
