"""Which keys changed since their one reader last looked: the change feed's first link."""

from __future__ import annotations

MAX_NOTED = 100_000
"""How many changed keys are kept before the log gives up and says "everything": a reader
that has not looked for that long does a full pass, which costs no more than reading them."""


class ChangeLog:
    """Keys noted since the last `take`, in the order first noted, for one reader. The first
    `take` (and one after more than `MAX_NOTED` keys) answers None: anything may have
    changed, so the reader reads everything."""

    def __init__(self, limit: int = MAX_NOTED) -> None:
        self._keys: dict[str, None] = {}
        self._all = True
        self._limit = limit

    def note(self, key: str) -> None:
        if self._all:
            return
        self._keys[key] = None
        if len(self._keys) > self._limit:
            self.note_all()

    def note_all(self) -> None:
        self._all = True
        self._keys.clear()

    def take(self) -> list[str] | None:
        """The keys noted since the last call, oldest first; None: read everything."""
        if self._all:
            self._all = False
            return None
        keys = list(self._keys)
        self._keys.clear()
        return keys
