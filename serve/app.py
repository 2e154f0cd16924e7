"""The Serve application builder: plain stage classes become deployments here, with the options of
the config tree. `ragc serve-config` and the Helm chart render the same options."""

from __future__ import annotations

from typing import Any

from ray import serve
from ray.serve.handle import DeploymentHandle

from cluster.config import DeploymentConfig, RagcConfig, load_config
from serve.ingress import make_ingress_app
from serve.rerank import RerankStage
from serve.retrieve import RetrieveStage
from serve.rewrite import RewriteStage
from serve.synthesize import SynthesizeStage
from serve.types import Passage, RetrievalResult, RewriteResult, StageStatusName, Synthesis

STAGE_CLASSES = {
    "rewrite": RewriteStage,
    "retrieve": RetrieveStage,
    "rerank": RerankStage,
    "synthesize": SynthesizeStage,
}


def deployment_options(name: str, d: DeploymentConfig) -> dict[str, Any]:
    return {
        "name": name,
        "autoscaling_config": {
            "min_replicas": d.min_replicas,
            "max_replicas": d.max_replicas,
            "initial_replicas": max(d.min_replicas, 1),
            "target_ongoing_requests": d.target_ongoing_requests,
            "upscale_delay_s": d.upscale_delay_s,
            "downscale_delay_s": d.downscale_delay_s,
        },
        "max_ongoing_requests": d.max_ongoing_requests,
        "max_queued_requests": d.max_queued_requests,
        "ray_actor_options": {"num_cpus": d.num_cpus, "num_gpus": d.num_gpus},
        "health_check_period_s": d.health_check_period_s,
        "health_check_timeout_s": d.health_check_timeout_s,
    }


class HandleStages:
    """`Stages` over deployment handles (the ingress's view of the other deployments)."""

    def __init__(
        self,
        rewrite: DeploymentHandle,
        retrieve: DeploymentHandle,
        rerank: DeploymentHandle,
        synthesize: DeploymentHandle,
    ) -> None:
        self._rewrite, self._retrieve, self._rerank, self._synthesize = rewrite, retrieve, rerank, synthesize

    async def rewrite(self, query: str, history: list[dict[str, str]], rewrite: bool, hyde: bool) -> RewriteResult:
        return await self._rewrite.rewrite.remote(query, history, rewrite, hyde)

    async def retrieve(self, tenant: str, query: str, filter_expr: str, hyde_passage: str | None) -> RetrievalResult:
        return await self._retrieve.retrieve.remote(tenant, query, filter_expr, hyde_passage)

    async def rerank(self, query: str, passages: list[Passage], top_n: int) -> tuple[list[Passage], StageStatusName]:
        return await self._rerank.rerank.remote(query, passages, top_n)

    async def synthesize(self, query: str, passages: list[Passage]) -> Synthesis:
        return await self._synthesize.synthesize.remote(query, passages)

    async def readiness(self) -> tuple[bool, str | None]:
        return await self._retrieve.readiness.remote()

    async def embed(self, text: str) -> list[float]:
        return await self._retrieve.embed.remote(text)

    async def index_version(self) -> int:
        return await self._retrieve.index_version.remote()


def build_app(cfg: RagcConfig) -> serve.Application:
    config = cfg.model_dump(mode="json")
    bound = {
        stage: serve.deployment(**deployment_options(stage, cfg.serve.deployment(stage)))(cls).bind(config)
        for stage, cls in STAGE_CLASSES.items()
    }
    api, routes = make_ingress_app()

    class IngressDeployment(routes):  # type: ignore[valid-type,misc]
        def __init__(
            self,
            config: dict[str, Any],
            rewrite: DeploymentHandle,
            retrieve: DeploymentHandle,
            rerank: DeploymentHandle,
            synthesize: DeploymentHandle,
        ) -> None:
            stages = HandleStages(rewrite, retrieve, rerank, synthesize)
            super().__init__(config, stages, stages.readiness)

        def check_health(self) -> None:
            return None

    ingress = serve.deployment(**deployment_options("ingress", cfg.serve.deployment("ingress")))(
        serve.ingress(api)(IngressDeployment)
    )
    return ingress.bind(config, bound["rewrite"], bound["retrieve"], bound["rerank"], bound["synthesize"])


def app_builder(args: dict[str, Any]) -> serve.Application:
    """Import path for Serve configs (`serve.app:app_builder`): `args.config` is the config tree (as
    `ragc serve-config` writes it), `args.config_file` a YAML file; RAGC_* env vars apply on top."""
    if "config" in args:
        cfg = RagcConfig.model_validate(args["config"])
    else:
        cfg = load_config(args.get("config_file"))
    return build_app(cfg)
