"""`connect`: a batch job waits out a Milvus that misses the handshake for a moment; the service does not."""

from __future__ import annotations

from typing import Any

import pytest
from pymilvus import MilvusException
from pymilvus.client.types import Status

from cluster.config import RagcConfig
from cluster.store import client as store_client


class FlakyMilvus:
    """Stands in for `MilvusClient`: fails the handshake `failures` times, then connects."""

    def __init__(self, failures: int, code: int = Status.CONNECT_FAILED) -> None:
        self.failures, self.code, self.calls = failures, code, 0

    def __call__(self, **kwargs: Any) -> dict[str, Any]:
        self.calls += 1
        if self.calls <= self.failures:
            raise MilvusException(code=self.code, message="Fail connecting to server on 127.0.0.1:1")
        return kwargs


def installed(monkeypatch: pytest.MonkeyPatch, failures: int, code: int = Status.CONNECT_FAILED) -> FlakyMilvus:
    milvus = FlakyMilvus(failures, code)
    monkeypatch.setattr(store_client, "MilvusClient", milvus)
    return milvus


@pytest.fixture
def no_sleep(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    slept: list[float] = []
    monkeypatch.setattr("tenacity.nap.time.sleep", slept.append)
    return slept


def test_a_handshake_that_times_out_is_tried_again_with_backoff(
    monkeypatch: pytest.MonkeyPatch, no_sleep: list[float]
) -> None:
    milvus = installed(monkeypatch, 3)
    cfg = RagcConfig.model_validate({"milvus": {"connect_timeout_s": 7}})
    connected = store_client.connect(cfg)
    assert milvus.calls == 4 and no_sleep == [1, 2, 4]
    assert connected["timeout"] == 7  # type: ignore[index]


def test_it_gives_up_after_the_configured_attempts_with_the_store_s_error(
    monkeypatch: pytest.MonkeyPatch, no_sleep: list[float]
) -> None:
    milvus = installed(monkeypatch, 10)
    cfg = RagcConfig.model_validate({"milvus": {"connect_attempts": 2}})
    with pytest.raises(MilvusException, match="Fail connecting"):
        store_client.connect(cfg)
    assert milvus.calls == 2 and no_sleep == [1]


def test_the_service_tries_once(monkeypatch: pytest.MonkeyPatch, no_sleep: list[float]) -> None:
    milvus = installed(monkeypatch, 1)
    with pytest.raises(MilvusException):
        store_client.connect(RagcConfig(), attempts=1)
    assert milvus.calls == 1 and no_sleep == []


def test_an_error_other_than_a_failed_handshake_is_not_retried(
    monkeypatch: pytest.MonkeyPatch, no_sleep: list[float]
) -> None:
    milvus = installed(monkeypatch, 1, Status.ILLEGAL_ARGUMENT)
    with pytest.raises(MilvusException):
        store_client.connect(RagcConfig())
    assert milvus.calls == 1 and no_sleep == []
