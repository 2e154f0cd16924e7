"""One writer per tenant: a lease in the Milvus catalog that every ingest and reindex of the tenant takes first,
so a sync job and a manual run never interleave their ledger and chunk writes.

The catalog is the one store every ingest already has (Redis is optional). It has no compare-and-set, so a
claim is written, left to settle, and read back: of two runs that both saw the lease free, the one whose
claim was written last reads it back and proceeds; the other reads the winner's claim and backs off. A lease
expires (`ingest.lease_ttl_s`) unless its holder renews it, so a killed job blocks nobody for long."""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Protocol

SETTLE_S = 0.3
log = logging.getLogger(__name__)


class TenantBusyError(RuntimeError):
    """Another run holds the tenant's lease; the message says who and since when."""


class KeyValueStore(Protocol):
    def get(self, key: str) -> Any: ...

    def put(self, key: str, value: Any) -> None: ...

    def delete(self, keys: list[str]) -> None: ...


def lease_key(alias: str, tenant: str) -> str:
    return f"lease:{alias}:{tenant}"


def holder_name() -> str:
    return f"{socket.gethostname()} pid {os.getpid()}"


@dataclass(frozen=True)
class Claim:
    token: str
    holder: str
    since: float
    expires: float

    @classmethod
    def of(cls, value: Any) -> Claim | None:
        if not isinstance(value, dict):
            return None
        try:
            return cls(str(value["token"]), str(value["holder"]), float(value["since"]), float(value["expires"]))
        except (KeyError, TypeError, ValueError):
            return None

    def describe(self) -> str:
        return f"{self.holder} since {time.strftime('%Y-%m-%d %H:%M:%S %Z', time.localtime(self.since))}"


class TenantLease:
    def __init__(
        self,
        store: KeyValueStore,
        key: str,
        ttl_s: float,
        wait_s: float = 0.0,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._store, self._key, self._ttl_s, self._wait_s = store, key, ttl_s, wait_s
        self._clock, self._sleep = clock, sleep
        self._token = uuid.uuid4().hex
        self._since = 0.0

    def acquire(self) -> None:
        """Take the lease, waiting up to `wait_s` for a live holder to finish; TenantBusyError past that."""
        deadline = self._clock() + self._wait_s
        while True:
            current = Claim.of(self._store.get(self._key))
            if current is None or current.token == self._token or current.expires <= self._clock():
                self._since = self._clock()
                self._write()
                self._sleep(SETTLE_S)
                current = Claim.of(self._store.get(self._key))
                if current is not None and current.token == self._token:
                    return
            assert current is not None
            if self._clock() >= deadline:
                tenant = self._key.rsplit(":", 1)[-1]
                raise TenantBusyError(f"tenant {tenant} is being synced by {current.describe()}; try again later")
            self._sleep(min(max(current.expires - self._clock(), SETTLE_S), max(deadline - self._clock(), 0.0), 2.0))

    def renew(self) -> None:
        self._write()

    def release(self) -> None:
        current = Claim.of(self._store.get(self._key))
        if current is not None and current.token == self._token:
            self._store.delete([self._key])

    def _write(self) -> None:
        now = self._clock()
        claim = {"token": self._token, "holder": holder_name(), "since": self._since, "expires": now + self._ttl_s}
        self._store.put(self._key, claim)


@contextmanager
def held(leases: list[TenantLease], ttl_s: float) -> Iterator[None]:
    """Hold every lease (taken in order; all released on exit), renewed by a thread at a third of the TTL."""
    taken: list[TenantLease] = []
    stop = threading.Event()
    try:
        for lease in leases:
            lease.acquire()
            taken.append(lease)

        def renew() -> None:
            while not stop.wait(ttl_s / 3):
                for lease in taken:
                    try:
                        lease.renew()
                    except Exception as exc:  # noqa: BLE001 - a store hiccup: the next renewal tries again
                        log.warning("could not renew the ingest lease: %s", exc)

        renewer = threading.Thread(target=renew, name="ragc-lease-renewal", daemon=True)
        renewer.start()
        yield
    finally:
        stop.set()
        for lease in taken:
            lease.release()
