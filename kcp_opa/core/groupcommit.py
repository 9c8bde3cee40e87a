"""One writer thread per process that commits, as one batch, whatever callers are waiting with.

The audit ledger and the nonce store both make a write durable before they answer (an fsync);
when several threads write at once, sharing that fsync is the whole gain. Each caller still
waits for its own item's result, or for the exception its batch raised: nothing is
acknowledged that is not on disk. A caller that finds no batch in flight commits its item
itself: a lone writer pays no hand-off to the writer thread and back, and whoever arrives while
it writes queues for the writer thread's next batch.
"""

from __future__ import annotations

import os
import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Generic, TypeVar

Item = TypeVar("Item")
Result = TypeVar("Result")
_Waiting = queue.SimpleQueue[tuple[Item, Future[Result]]]


class GroupCommit(Generic[Item, Result]):
    """Hand items to ``write_batch`` (items in, one result per item out, in order) in batches."""

    def __init__(self, write_batch: Callable[[list[Item]], list[Result]], *, max_batch: int) -> None:
        self._write_batch = write_batch
        self._max_batch = max_batch
        self._lock = threading.Lock()
        self._writer: tuple[int, _Waiting[Item, Result], threading.Lock] | None = None

    def submit(self, item: Item) -> Result:
        """Block until ``item``'s batch is committed; raises what ``write_batch`` raised."""
        waiting, writing = self._state()
        # No batch in flight and none queued (so the queued are never overtaken): commit it here.
        if waiting.empty() and writing.acquire(blocking=False):
            try:
                return self._write_batch([item])[0]
            finally:
                writing.release()
        done: Future[Result] = Future()
        waiting.put((item, done))
        return done.result()

    def _state(self) -> tuple[_Waiting[Item, Result], threading.Lock]:
        """This process's queue and its writing lock (new after a fork: a copied lock may be held)."""
        pid = os.getpid()
        with self._lock:
            if self._writer is None or self._writer[0] != pid:  # none yet, or inherited across fork
                waiting: _Waiting[Item, Result] = queue.SimpleQueue()
                writing = threading.Lock()
                threading.Thread(target=self._run, args=(waiting, writing), daemon=True).start()
                self._writer = (pid, waiting, writing)
            return self._writer[1], self._writer[2]

    def _run(self, waiting: _Waiting[Item, Result], writing: threading.Lock) -> None:
        while True:
            batch = [waiting.get()]
            with writing:  # after the commit in flight: everything queued meanwhile goes as one batch
                while len(batch) < self._max_batch:
                    try:
                        batch.append(waiting.get_nowait())
                    except queue.Empty:
                        break
                try:
                    results = self._write_batch([item for item, _ in batch])
                except Exception as exc:  # every caller in the batch gets it: nothing was committed
                    for _, done in batch:
                        done.set_exception(exc)
                    continue
            for (_, done), result in zip(batch, results, strict=True):
                done.set_result(result)
