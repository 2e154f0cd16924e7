"""API key -> tenant. Keys live in a secret (file or env var), never in the config itself."""

from __future__ import annotations

import hmac
import json

import yaml

from cluster.config import AuthConfig
from cluster.tenancy import check_tenant
from serve.errors import UnauthorizedError

LOOPBACK = {"127.0.0.1", "localhost", "::1"}


def load_api_keys(cfg: AuthConfig) -> dict[str, str]:
    raw = cfg.api_keys.resolve()
    if not raw:
        return {}
    try:
        data = json.loads(raw)
    except json.JSONDecodeError:
        data = yaml.safe_load(raw)
    if not isinstance(data, dict):
        raise ValueError("api keys must be a mapping {api_key: tenant}")  # noqa: TRY004 - a config error
    return {str(k): check_tenant(str(v)) for k, v in data.items()}


class Authenticator:
    def __init__(self, cfg: AuthConfig, host: str) -> None:
        if not cfg.enabled and host not in LOOPBACK:
            raise ValueError(f"auth is off: refusing to serve on non-loopback host {host!r}")
        self._enabled = cfg.enabled
        self._single_tenant = check_tenant(cfg.single_tenant)
        self._keys = load_api_keys(cfg) if cfg.enabled else {}

    def tenant_for(self, authorization: str | None, api_key: str | None) -> str:
        if not self._enabled:
            return self._single_tenant
        key = api_key
        if not key and authorization and authorization.lower().startswith("bearer "):
            key = authorization[7:].strip()
        if not key:
            raise UnauthorizedError("missing API key (Authorization: Bearer <key> or X-API-Key)")
        for known, tenant in self._keys.items():
            if hmac.compare_digest(known.encode(), key.encode()):
                return tenant
        raise UnauthorizedError("unknown API key")
