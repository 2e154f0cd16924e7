"""A small bounded LRU with per-entry time to live (in-process cache level)."""

from __future__ import annotations

import time
from collections import OrderedDict
from typing import Any


class TTLCache:
    """Bounded LRU with a per-entry time to live (L1; one per replica, no locking: asyncio only)."""

    def __init__(self, max_entries: int, ttl_s: float) -> None:
        self._max = max_entries
        self._ttl_s = ttl_s
        self._data: OrderedDict[str, tuple[float, Any]] = OrderedDict()

    def get(self, key: str) -> Any | None:
        item = self._data.get(key)
        if item is None:
            return None
        expires, value = item
        if expires < time.monotonic():
            del self._data[key]
            return None
        self._data.move_to_end(key)
        return value

    def put(self, key: str, value: Any) -> None:
        self._data[key] = (time.monotonic() + self._ttl_s, value)
        self._data.move_to_end(key)
        while len(self._data) > self._max:
            self._data.popitem(last=False)

    def __len__(self) -> int:
        return len(self._data)
