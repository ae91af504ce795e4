"""The binding cycle: a cycle's writes sent behind it, as kube-scheduler separates its binding
cycle from its scheduling cycle.

A cycle decides, plans its writes (integration/apply.py `Applier.plan`, which assumes each in the
watch cache, so the next cycle sees the pods Binding / Releasing and never decides them twice),
submits the batch here and returns. One thread sends the batches in the order the cycles made
them (a batch: failed BindRequests deleted, gangs in parallel, then evictions, as a synchronous
apply sends them), so an eviction never overtakes a bind decided before it. When a batch is
done, `on_done` reports it (status events, metrics) — counts come from what was written, not
from what was decided.

Leadership: every write checks that this replica leads and that its batch was not dropped.
`drop()` (leadership lost, or taken again) makes every queued and running batch stop at its
next write and forgets their assumptions that were not written, so the next leader — or this
replica after its re-list — decides those pods afresh.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from typing import Callable

from .apply import ApplyOutcome, Applier, Batch

log = logging.getLogger("kai_cp.writer")


class Writer:
    def __init__(self, applier: Applier, on_done: Callable[[Batch, ApplyOutcome], None] | None = None):
        self.applier = applier
        self.on_done = on_done
        self._queue: deque[Batch] = deque()
        self._cv = threading.Condition()
        self._term = 0                   # bumped by drop(): batches of an older term write nothing
        self._running: Batch | None = None
        self._closed = False
        self.done_batches = 0
        self._thread = threading.Thread(target=self._loop, name="writer", daemon=True)
        self._thread.start()

    # -- submitting ----------------------------------------------------------------------------
    def submit(self, batch: Batch) -> Batch:
        """Queue a batch (one with no writes is done at once)."""
        if not batch.size():
            return batch
        with self._cv:
            term = self._term
            batch.alive = lambda: self._term == term
            batch.queued_at = time.monotonic()
            self._queue.append(batch)
            self._cv.notify_all()
        return batch

    def backlog(self) -> int:
        """Writes queued or being sent."""
        with self._cv:
            return sum(b.size() for b in self._queue) + (self._running.size() if self._running else 0)

    def idle(self) -> bool:
        with self._cv:
            return not self._queue and self._running is None

    def wait(self, batch: Batch | None = None, timeout: float | None = None) -> bool:
        """Until `batch` (default: everything submitted so far) is done or dropped."""
        end = None if timeout is None else time.monotonic() + timeout
        with self._cv:
            last = batch or (self._queue[-1] if self._queue else self._running)
            while last is not None and (last is self._running or last in self._queue):
                left = None if end is None else end - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._cv.wait(left)
        return True

    def drop(self, reason: str) -> int:
        """Stop every queued and running batch at its next write; forget what they did not write.
        Returns the number of batches dropped."""
        with self._cv:
            self._term += 1
            dropped = list(self._queue)
            self._queue.clear()
            running = self._running
        for b in dropped:
            self.applier.forget(b)
        n = len(dropped) + (1 if running is not None else 0)
        if n:
            log.warning("%s: %d batch(es) of writes dropped (%d writes queued); their pods are decided again",
                        reason, n, sum(b.size() for b in dropped))
        return n

    def close(self, timeout: float) -> None:
        """Let the queued writes finish for up to `timeout` seconds, drop the rest, wait for the one
        being sent (its next write stops it), then stop the thread."""
        if not self.wait(timeout=timeout):
            self.drop("stopping")
        with self._cv:
            self._closed = True
            self._cv.notify_all()
        self._thread.join(timeout + 30)

    # -- sending -------------------------------------------------------------------------------
    def _loop(self) -> None:
        while True:
            with self._cv:
                while not self._queue and not self._closed:
                    self._cv.wait()
                if not self._queue:
                    return
                batch = self._running = self._queue.popleft()
            try:
                if batch.alive():
                    out = self.applier.run(batch)
                else:
                    self.applier.forget(batch)
                    out = ApplyOutcome(stopped_not_leader=True)
                if out.stopped_not_leader and batch.alive():     # its own guard saw the lease lost
                    self.drop("leadership lost while writing")
                if self.on_done:
                    self.on_done(batch, out)
            except Exception as e:      # a bug in one batch never stops the writer
                log.exception("writes of cycle %d failed: %s", batch.cycle, e)
                self.applier.forget(batch)
            finally:
                with self._cv:
                    self._running = None
                    self.done_batches += 1
                    self._cv.notify_all()
