"""API key -> tenant and access groups. Keys live in a secret (file or env var), never in the config itself."""

from __future__ import annotations

import hmac
import json
from typing import Any, NamedTuple

import yaml

from cluster.config import AuthConfig
from cluster.labels import check_labels
from cluster.tenancy import check_tenant
from serve.errors import UnauthorizedError

LOOPBACK = {"127.0.0.1", "localhost", "::1"}


class Caller(NamedTuple):
    """Who asks: its key's tenant, and the access groups whose documents it reads besides the tenant's public
    ones (a document that declares no `access`)."""

    tenant: str
    groups: tuple[str, ...] = ()


def load_api_keys(cfg: AuthConfig) -> dict[str, Caller]:
    """`{key: tenant}` or `{key: {tenant: T, groups: [G, ...]}}`, in JSON or YAML."""
    raw = cfg.api_keys.resolve()
    if not raw:
        return {}
    try:
        data = json.loads(raw)
    except json.JSONDecodeError:
        data = yaml.safe_load(raw)
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


class Authenticator:
    def __init__(self, cfg: AuthConfig, host: str) -> None:
        if not cfg.enabled and host not in LOOPBACK:
            raise ValueError(f"auth is off: refusing to serve on non-loopback host {host!r}")
        self._enabled = cfg.enabled
        self._single_tenant = check_tenant(cfg.single_tenant)
        self._keys = load_api_keys(cfg) if cfg.enabled else {}

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
        for known, caller in self._keys.items():
            if hmac.compare_digest(known.encode(), key.encode()):
                return caller
        raise UnauthorizedError("unknown API key")
