"""Fault injection: failing answers and added latency for requests that match a rule.

Rules are added from the test's thread and consumed on the server's loop, hence the lock.
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass


@dataclass(eq=False)
class FaultRule:
    """Requests matching (method, path regex, watch) get `status` and/or `delay` seconds first.

    `path` is searched (`re.search`) in the request's path plus its query string
    (`/api/v1/pods?watch=true&...`). `times` is how many requests the rule applies to
    (None: until removed); `hits` counts the requests it has applied to so far.
    """

    status: int | None = None
    method: str | None = None
    path: re.Pattern[str] | None = None
    watch: bool | None = None
    times: int | None = 1
    delay: float = 0.0
    reason: str | None = None
    message: str | None = None
    hits: int = 0

    @property
    def exhausted(self) -> bool:
        return self.times is not None and self.hits >= self.times

    def matches(self, method: str, target: str, is_watch: bool) -> bool:
        if self.method is not None and self.method != method:
            return False
        if self.watch is not None and self.watch != is_watch:
            return False
        return self.path is None or self.path.search(target) is not None


class Faults:
    """The fault rules of one emulator. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._rules: list[FaultRule] = []

    def fail(
        self,
        status: int,
        *,
        method: str | None = None,
        path: str | re.Pattern[str] | None = None,
        watch: bool | None = None,
        times: int | None = 1,
        reason: str | None = None,
        message: str | None = None,
    ) -> FaultRule:
        """The next `times` matching requests are answered `status` (a v1 Status body).

        A watch request failed with 410 gets a 200 stream with one ERROR event (code 410),
        as the real server does for an expired resourceVersion.
        """
        return self._add(
            FaultRule(
                status=status,
                method=method.upper() if method else None,
                path=re.compile(path) if isinstance(path, str) else path,
                watch=watch,
                times=times,
                reason=reason,
                message=message,
            )
        )

    def delay(
        self,
        seconds: float,
        *,
        method: str | None = None,
        path: str | re.Pattern[str] | None = None,
        watch: bool | None = None,
        times: int | None = None,
    ) -> FaultRule:
        """Matching requests wait `seconds` (asynchronously) before being served."""
        return self._add(
            FaultRule(
                method=method.upper() if method else None,
                path=re.compile(path) if isinstance(path, str) else path,
                watch=watch,
                times=times,
                delay=seconds,
            )
        )

    def _add(self, rule: FaultRule) -> FaultRule:
        with self._lock:
            self._rules.append(rule)
        return rule

    def remove(self, rule: FaultRule) -> None:
        with self._lock:
            if rule in self._rules:
                self._rules.remove(rule)

    def clear(self) -> None:
        with self._lock:
            self._rules.clear()

    @property
    def rules(self) -> list[FaultRule]:
        with self._lock:
            return list(self._rules)

    def take(self, method: str, target: str, is_watch: bool) -> tuple[float, FaultRule | None]:
        """Consume the rules matching one request: (total delay, the first failing rule)."""
        if not self._rules:  # the fast path: no lock when nothing is injected
            return 0.0, None
        delay = 0.0
        failure: FaultRule | None = None
        with self._lock:
            for rule in self._rules:
                if rule.exhausted or not rule.matches(method, target, is_watch):
                    continue
                if rule.status is None:
                    rule.hits += 1
                    delay += rule.delay
                elif failure is None:
                    rule.hits += 1
                    failure = rule
            self._rules = [rule for rule in self._rules if not rule.exhausted]
        return delay, failure
