"""API key -> tenant and access groups. Keys live in a secret (file or env var), never in the config itself, and
are read again every `serve.auth.reload_s`: a key added, rotated or revoked in the file (a Kubernetes Secret's
mounted file is updated in place) takes effect without restarting the service."""

from __future__ import annotations

import hmac
import json
import logging
import time
from collections.abc import Callable
from typing import Any, NamedTuple

import yaml

from cluster.config import AuthConfig
from cluster.labels import check_labels
from cluster.tenancy import check_tenant
from serve import metrics
from serve.errors import UnauthorizedError

logger = logging.getLogger(__name__)
LOOPBACK = {"127.0.0.1", "localhost", "::1"}


class Caller(NamedTuple):
    """Who asks: its key's tenant, and the access groups whose documents it reads besides the tenant's public
    ones (a document that declares no `access`)."""

    tenant: str
    groups: tuple[str, ...] = ()


def load_api_keys(cfg: AuthConfig) -> dict[str, Caller]:
    return parse_api_keys(cfg.api_keys.resolve())


def parse_api_keys(raw: str | None) -> dict[str, Caller]:
    """`{key: tenant}` or `{key: {tenant: T, groups: [G, ...]}}`, in JSON or YAML."""
    if not raw:
        return {}
    try:
        data = json.loads(raw)
    except json.JSONDecodeError:
        try:
            data = yaml.safe_load(raw)
        except yaml.YAMLError as exc:
            raise ValueError(f"api keys are neither JSON nor YAML: {exc}") from exc
    if not isinstance(data, dict):
        raise ValueError("api keys must be a mapping {api_key: tenant}")  # noqa: TRY004 - a config error
    return {str(k): _caller(v) for k, v in data.items()}


def _caller(value: Any) -> Caller:
    if not isinstance(value, dict):
        return Caller(check_tenant(str(value)))
    if set(value) - {"tenant", "groups"} or "tenant" not in value:
        raise ValueError(f"an api key maps to a tenant or to {{tenant, groups}}, not {sorted(value)}")
    groups = value.get("groups") or []
    if not isinstance(groups, list) or not all(isinstance(g, str) for g in groups):
        raise ValueError("an api key's groups must be a list of strings")
    return Caller(check_tenant(str(value["tenant"])), tuple(check_labels(groups, "groups")))


def _parsed(raw: str | None) -> tuple[dict[str, Caller] | None, str]:
    """The keys in `raw`, or None and why not."""
    if raw is None:
        return None, "the secret is gone from its file or variable"
    try:
        return parse_api_keys(raw), ""
    except ValueError as exc:
        return None, str(exc)


class Authenticator:
    def __init__(self, cfg: AuthConfig, host: str, clock: Callable[[], float] = time.monotonic) -> None:
        if not cfg.enabled and host not in LOOPBACK:
            raise ValueError(f"auth is off: refusing to serve on non-loopback host {host!r}")
        self._enabled = cfg.enabled
        self._single_tenant = check_tenant(cfg.single_tenant)
        self._source = cfg.api_keys
        self._reload_s = cfg.reload_s
        self._clock = clock
        self._raw = cfg.api_keys.resolve() if cfg.enabled else None
        self._keys = parse_api_keys(self._raw)  # malformed at start: the replica does not start, with the reason
        self._read_at = clock()
        self._refused: str | None = None  # the last changed text that failed to parse (logged once)

    def _reload(self) -> None:
        """The keys as the secret holds them now, at most every `reload_s`. A changed text that does not parse,
        or a secret gone from its file, keeps the keys this replica has: a bad edit must not lock every tenant
        out. An empty mapping is a valid one, and revokes every key."""
        if not self._enabled or self._reload_s <= 0 or self._clock() - self._read_at < self._reload_s:
            return
        self._read_at = self._clock()
        raw = self._source.resolve()
        if raw == self._raw or raw == self._refused:
            return
        keys, why = _parsed(raw)
        if keys is None:
            self._refused = raw
            metrics.count_key_reload("refused")
            logger.error("api keys not reloaded, the previous ones stay in use: %s", why)
            return
        self._keys, self._raw, self._refused = keys, raw, None
        metrics.count_key_reload("reloaded")
        logger.info("api keys reloaded: %d keys", len(keys))

    def tenant_for(self, authorization: str | None, api_key: str | None) -> str:
        return self.caller_for(authorization, api_key).tenant

    def caller_for(self, authorization: str | None, api_key: str | None) -> Caller:
        if not self._enabled:
            return Caller(self._single_tenant)
        key = api_key
        if not key and authorization and authorization.lower().startswith("bearer "):
            key = authorization[7:].strip()
        if not key:
            raise UnauthorizedError("missing API key (Authorization: Bearer <key> or X-API-Key)")
        self._reload()
        for known, caller in self._keys.items():
            if hmac.compare_digest(known.encode(), key.encode()):
                return caller
        raise UnauthorizedError("unknown API key")
