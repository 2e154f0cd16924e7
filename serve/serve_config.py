"""`ragc serve-config`: the Serve deploy config (what `serve build` writes) from the config tree."""

from __future__ import annotations

from typing import Any

from cluster.config import STAGES, RagcConfig


def serve_deploy_config(cfg: RagcConfig, http_host: str | None = None, port: int | None = None) -> dict[str, Any]:
    from serve.app import deployment_options

    deployments = []
    for stage in STAGES:
        options = deployment_options(stage, cfg.serve.deployment(stage))
        deployments.append(options)
    return {
        "proxy_location": "EveryNode",
        "http_options": {
            "host": http_host or cfg.serve.http_host,
            "port": port or cfg.local.http_port,
            "request_timeout_s": cfg.serve.request_timeout_s + 5,
        },
        "applications": [
            {
                "name": cfg.serve.app_name,
                "route_prefix": cfg.serve.route_prefix,
                "import_path": "serve.app:app_builder",
                "args": {"config": cfg.model_dump(mode="json")},
                "deployments": deployments,
            }
        ],
    }
