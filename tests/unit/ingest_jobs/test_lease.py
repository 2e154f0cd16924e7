from typing import Any

import pytest

from ingest_jobs.lease import TenantBusyError, TenantLease, held, lease_key
from tests.fakes import DictStore

KEY = lease_key("ragc_chunks", "acme")


class Clock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def lease(store: dict[str, Any], clock: Clock, ttl_s: float = 60.0, wait_s: float = 0.0) -> TenantLease:
    return TenantLease(DictStore(store), KEY, ttl_s, wait_s, clock=clock, sleep=clock.sleep)


def test_a_second_run_is_refused_with_who_holds_the_tenant_then_gets_it_after_release() -> None:
    store: dict[str, Any] = {}
    clock = Clock()
    first, second = lease(store, clock), lease(store, clock)
    first.acquire()
    with pytest.raises(TenantBusyError, match=r"tenant acme is being synced by .+ pid \d+ since \d{4}-"):
        second.acquire()
    first.release()
    second.acquire()
    assert store[KEY]["token"] == second._token


def test_a_waiting_run_gets_the_lease_once_the_holder_lets_it_lapse() -> None:
    store: dict[str, Any] = {}
    clock = Clock()
    crashed = lease(store, clock, ttl_s=10)
    crashed.acquire()  # and never renews or releases: a killed job
    patient = lease(store, clock, wait_s=30)
    patient.acquire()
    assert store[KEY]["token"] == patient._token and clock.now >= 1_010
    crashed.release()  # a late release of a lapsed lease does not free the new holder's
    assert store[KEY]["token"] == patient._token


def test_of_two_runs_that_saw_the_lease_free_only_the_last_writer_proceeds() -> None:
    store: dict[str, Any] = {}
    clock = Clock()
    rival = {"token": "rival", "holder": "other-host pid 7", "since": clock.now, "expires": clock.now + 60}

    def rival_writes_while_we_settle(seconds: float) -> None:
        store[KEY] = rival  # it also saw the lease free, and its claim lands after ours
        clock.sleep(seconds)

    ours = TenantLease(DictStore(store), KEY, 60.0, 0.0, clock=clock, sleep=rival_writes_while_we_settle)
    with pytest.raises(TenantBusyError, match="other-host pid 7"):
        ours.acquire()
    assert store[KEY] is rival


def test_held_releases_every_lease_even_when_the_job_fails() -> None:
    store: dict[str, Any] = {}
    clock = Clock()
    leases = [
        TenantLease(DictStore(store), lease_key("c", t), 60.0, clock=clock, sleep=clock.sleep) for t in ("a", "b")
    ]
    with pytest.raises(RuntimeError, match="boom"), held(leases, 60.0):
        assert set(store) == {lease_key("c", "a"), lease_key("c", "b")}
        raise RuntimeError("boom")
    assert store == {}
