"""Fault hooks for resilience tests: a stage can be made slower than its timeout, from config
(`serve.faults.delay_s`) at start or through a deployment handle at run time (never over HTTP)."""

from __future__ import annotations

import asyncio


class FaultHooks:
    _fault_delay_s: float = 0.0

    def inject_delay(self, seconds: float) -> None:
        """Every call of this replica sleeps `seconds` first; 0 clears the fault."""
        self._fault_delay_s = max(0.0, float(seconds))

    async def _injected_delay(self) -> None:
        if self._fault_delay_s:
            await asyncio.sleep(self._fault_delay_s)
