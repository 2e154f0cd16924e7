"""Tenant ids: validated once, so they are safe in keys, filters and partition names."""

from __future__ import annotations

import re

TENANT_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


def check_tenant(tenant: str) -> str:
    if not TENANT_PATTERN.match(tenant):
        raise ValueError(
            f"invalid tenant id {tenant!r}: use 1-64 letters, digits, '.', '_' or '-', starting with a letter or digit"
        )
    return tenant
