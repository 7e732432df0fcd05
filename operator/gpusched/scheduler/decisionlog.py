"""The operator's log of decisions: a line when a group's outcome changes, never the same
failure again on every retry, and a summary line every `SUMMARY_SECONDS` while groups wait.

One unschedulable group retried for 17 minutes logged its whole message 91 times; now it logs
once, again when its reason or message changes, and is counted in the summary meanwhile.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Collection

from gpusched.engine.result import GroupDecision, Phase, Reason
from gpusched.engine.wording import counted

logger = logging.getLogger("gpusched.scheduler.loop")

SUMMARY_SECONDS = 300.0
"""How often (in seconds, on the service's clock) the summary of waiting groups is logged
while any group waits; a quiet operator logs nothing."""
MAX_REMEMBERED = 100_000
"""Groups whose last logged outcome is remembered; beyond this the memory starts afresh (a
group's next outcome is logged once more)."""


class DecisionLog:
    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        self._last: dict[str, tuple[str, str]] = {}
        """Root group → (reason, message) last logged."""
        self._waiting: dict[str, str] = {}
        """Root group → its reason, while it is not placed."""
        self._placed = 0
        self._next_summary = clock() + SUMMARY_SECONDS

    def outcome(self, decision: GroupDecision, placed: int) -> None:
        """A root group's decision this cycle; ``placed``: its pods bound by it."""
        if decision.phase is Phase.SCHEDULED:
            self._waiting.pop(decision.name, None)
            self._last.pop(decision.name, None)
            if placed:
                self._placed += placed
                where = "/".join(decision.placement.values())
                inside = f" in {where}" if where else ""
                pods = counted(placed, "pod")
                logger.info("%s %s: %s placed%s", decision.kind, decision.name, pods, inside)
            return
        # A gang short of pods counts them in its message: a new line per pod created would
        # be the noise this log avoids, so it is logged once per reason.
        counting = decision.reason is Reason.WAITING_FOR_PODS
        said = (decision.reason.value, "" if counting else decision.message)
        self._waiting[decision.name] = decision.reason.value
        if self._last.get(decision.name) == said:
            return
        if len(self._last) >= MAX_REMEMBERED:
            self._last.clear()
        self._last[decision.name] = said
        logger.info(
            "%s %s: not placed (%s): %s",
            decision.kind,
            decision.name,
            decision.reason,
            decision.message,
        )

    def pod(self, key: str, reason: str, message: str) -> None:
        """A pod without a group left pending: logged when its reason or message changes."""
        if self._last.get(key) == (reason, message):
            return
        if len(self._last) >= MAX_REMEMBERED:
            self._last.clear()
        self._last[key] = (reason, message)
        logger.info("pod %s not placed (%s): %s", key, reason, message)

    def gone(self, key: str) -> None:
        self._last.pop(key, None)
        self._waiting.pop(key, None)

    def summary(self, groups: Collection[str]) -> None:
        """Logs the summary when it is due and something waits or was placed; ``groups``:
        the groups that exist (the others are forgotten)."""
        now = self.clock()
        if now < self._next_summary:
            return
        for key in [k for k in self._waiting if k not in groups]:
            self.gone(key)
        self._next_summary = now + SUMMARY_SECONDS
        if not self._waiting and not self._placed:
            return
        reasons = Counter(self._waiting.values())
        waiting = ", ".join(f"{n} {reason}" for reason, n in sorted(reasons.items()))
        logger.info(
            "summary: %s placed in the last %.0f s; %s waiting%s",
            counted(self._placed, "pod"),
            SUMMARY_SECONDS,
            counted(len(self._waiting), "group"),
            f" ({waiting})" if waiting else "",
        )
        self._placed = 0
