"""Client-side rate limit of the status writes (`--qps`, `--burst`, as KAI's client): a token
bucket shared by the status workers. Decisions (BindRequests, bindings, evictions) are not
throttled: they are the scheduler's output, and a cycle's gangs would otherwise wait behind
status text. With a thousand pending jobs the status of one cycle is ~10,000 writes; unthrottled
they took a core of the API server and slowed the cycles for as long as they went out."""

from __future__ import annotations

import threading
import time


class TokenBucket:
    """`rate` tokens a second, at most `burst` saved; `rate <= 0` means no limit."""

    def __init__(self, rate: float, burst: int, clock=time.monotonic, sleep=time.sleep):
        self.rate, self.burst = rate, max(1, burst)
        self._tokens = float(self.burst)
        self._clock, self._sleep = clock, sleep
        self._at = clock()
        self._lock = threading.Lock()

    def acquire(self) -> float:
        """Take a token, waiting for one if none is left; returns the seconds waited."""
        if self.rate <= 0:
            return 0.0
        with self._lock:
            now = self._clock()
            self._tokens = min(self.burst, self._tokens + (now - self._at) * self.rate)
            self._at = now
            self._tokens -= 1
            wait = -self._tokens / self.rate if self._tokens < 0 else 0.0
        if wait > 0:
            self._sleep(wait)
        return wait
