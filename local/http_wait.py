"""Wait for an HTTP endpoint to answer 200, while the process that should serve it is alive."""

from __future__ import annotations

import time
from collections.abc import Callable

import httpx

POLL_S = 1.0


class NotUpError(RuntimeError):
    pass


def wait_for_http(url: str, timeout_s: float, alive: Callable[[], bool] = lambda: True) -> None:
    deadline = time.monotonic() + timeout_s
    last = "no answer"
    while time.monotonic() < deadline:
        if not alive():
            raise NotUpError(f"{url}: the serving process exited ({last})")
        try:
            response = httpx.get(url, timeout=5.0)
            if response.status_code == 200:
                return
            last = f"HTTP {response.status_code}: {response.text[:500]}"
        except httpx.HTTPError as exc:
            last = str(exc) or type(exc).__name__
        time.sleep(POLL_S)
    raise NotUpError(f"{url} not ready after {timeout_s:.0f}s: {last}")
