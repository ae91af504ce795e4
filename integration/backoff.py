"""Per-pod back-off after failed binds (KAI #2074: a pod whose bind keeps failing must not win
every cycle and starve the others). A failed pod waits 1 s, 2 s, 4 s ... up to 10 s before it
is considered again (kube-scheduler's pod back-off: 1 s doubling to 10 s); a success clears it."""

from __future__ import annotations

import threading
import time


class BindBackoff:
    def __init__(self, base: float = 1.0, cap: float = 10.0, clock=time.monotonic):
        self.base, self.cap, self.clock = base, cap, clock
        self._fails: dict[str, tuple[int, float]] = {}     # pod key -> (failures, until)
        self._lock = threading.Lock()

    def fail(self, key: str) -> float:
        with self._lock:
            n = self._fails.get(key, (0, 0.0))[0] + 1
            delay = min(self.cap, self.base * 2 ** (n - 1))
            self._fails[key] = (n, self.clock() + delay)
            return delay

    def success(self, key: str) -> None:
        with self._lock:
            self._fails.pop(key, None)

    def waiting(self, key: str) -> bool:
        with self._lock:
            entry = self._fails.get(key)
            return entry is not None and entry[1] > self.clock()

    def active_keys(self) -> set[str]:
        now = self.clock()
        with self._lock:
            # Entries long expired belong to pods that were bound or deleted meanwhile: forget them.
            stale = [k for k, (_, until) in self._fails.items() if until < now - 30 * self.cap]
            for k in stale:
                del self._fails[k]
            return {k for k, (_, until) in self._fails.items() if until > now}

    def failures(self, key: str) -> int:
        with self._lock:
            return self._fails.get(key, (0, 0.0))[0]
