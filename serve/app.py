"""The Serve application builder: plain stage classes become deployments here, with the options of
the config tree. `ragc serve-config` and the Helm chart render the same options."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, Protocol, cast

from ray import serve
from ray.serve.handle import DeploymentHandle, DeploymentResponseGenerator

from cluster.config import DeploymentConfig, RagcConfig, ResponseMode, load_config
from serve.edge.ingress import make_ingress_app
from serve.llm.engine import LLMEngine, engine_deployment_name
from serve.roles import Stages
from serve.stages.rerank import RerankStage
from serve.stages.retrieve import RetrieveStage
from serve.stages.rewrite import RewriteStage
from serve.stages.synthesize import SynthesizeStage
from serve.types import (
    AnswerContext,
    DocumentPage,
    Merged,
    Passage,
    Reranked,
    RetrievalResult,
    RewriteResult,
    SynthesisItem,
)


class BindableStage(Protocol):
    """A stage as the builder binds it: its arguments come out of the tree."""

    @staticmethod
    def tree_args(tree: RagcConfig) -> dict[str, Any]: ...


STAGE_CLASSES: dict[str, type[BindableStage]] = {
    "rewrite": RewriteStage,
    "retrieve": RetrieveStage,
    "rerank": RerankStage,
    "synthesize": SynthesizeStage,
}


def deployment_options(name: str, d: DeploymentConfig) -> dict[str, Any]:
    options: dict[str, Any] = {
        "name": name,
        "autoscaling_config": {
            "min_replicas": d.min_replicas,
            "max_replicas": d.max_replicas,
            "initial_replicas": max(d.min_replicas, 1),
            "target_ongoing_requests": d.target_ongoing_requests,
            "upscale_delay_s": d.upscale_delay_s,
            "downscale_delay_s": d.downscale_delay_s,
            "look_back_period_s": d.look_back_period_s,
            "metrics_interval_s": d.metrics_interval_s,
        },
        "max_ongoing_requests": d.max_ongoing_requests,
        "max_queued_requests": d.max_queued_requests,
        "backpressure_config": {"status_code": 503, "retry_after_s": d.overload_retry_after_s},
        "ray_actor_options": {"num_cpus": d.num_cpus, "num_gpus": d.num_gpus},
        "health_check_period_s": d.health_check_period_s,
        "health_check_timeout_s": d.health_check_timeout_s,
    }
    if d.max_replicas_per_node is not None:  # Serve's own default: no limit
        options["max_replicas_per_node"] = d.max_replicas_per_node
    return options


class HandleRewriter:
    def __init__(self, handle: DeploymentHandle) -> None:
        self._handle = handle

    async def rewrite(
        self, query: str, history: list[dict[str, str]], rewrite: bool, hyde: bool, multi_query: bool = False
    ) -> RewriteResult:
        return await self._handle.rewrite.remote(query, history, rewrite, hyde, multi_query)


class HandleRetriever:
    def __init__(self, handle: DeploymentHandle) -> None:
        self._handle = handle

    async def retrieve(
        self,
        tenant: str,
        query: str,
        filter_expr: str,
        hyde_passage: str | None,
        paraphrases: tuple[str, ...] = (),
        groups: tuple[str, ...] = (),
    ) -> RetrievalResult:
        return await self._handle.retrieve.remote(tenant, query, filter_expr, hyde_passage, paraphrases, groups)

    async def embed(self, text: str) -> list[float]:
        return await self._handle.embed.remote(text)

    async def neighbours(self, tenant: str, passages: list[Passage], window: int) -> dict[str, str]:
        return await self._handle.neighbours.remote(tenant, passages, window)

    async def merged(self, tenant: str, passages: list[Passage], min_siblings: int, max_chars: int) -> Merged:
        return await self._handle.merged.remote(tenant, passages, min_siblings, max_chars)

    async def documents(
        self, tenant: str, filter_expr: str, after: str | None, limit: int, groups: tuple[str, ...] = ()
    ) -> DocumentPage:
        return await self._handle.documents.remote(tenant, filter_expr, after, limit, groups)

    async def index_version(self) -> int:
        return await self._handle.index_version.remote()

    async def readiness(self) -> tuple[bool, str | None]:
        return await self._handle.readiness.remote()


class HandleReranker:
    def __init__(self, handle: DeploymentHandle) -> None:
        self._handle = handle

    async def rerank(self, query: str, passages: list[Passage], top_n: int) -> Reranked:
        return await self._handle.rerank.remote(query, passages, top_n)


class HandleSynthesizer:
    """Streams through a streaming handle, so tokens flow engine -> synthesize -> ingress as they are made."""

    def __init__(self, handle: DeploymentHandle) -> None:
        self._handle = handle
        self._stream = handle.options(stream=True)

    async def synthesize_stream(
        self,
        query: str,
        passages: list[Passage],
        context: AnswerContext | None = None,
        mode: ResponseMode = "compact",
    ) -> AsyncIterator[SynthesisItem]:
        responses = self._stream.synthesize_stream.remote(query, passages, context=context, mode=mode)
        async for item in cast(DeploymentResponseGenerator, responses):
            yield item

    async def llm_state(self) -> str:
        return await self._handle.llm_state.remote()


def build_app(cfg: RagcConfig) -> serve.Application:
    """Each deployment is bound with its own typed sections (`tree_args`), pickled by Serve as they are."""
    config = cfg.model_dump(mode="json")
    scfg = cfg.serve
    engines = {
        name: serve.deployment(**deployment_options(engine_deployment_name(name), scfg.llm.engines[name].deployment))(
            LLMEngine
        ).bind(**LLMEngine.tree_args(cfg, name))
        for name in scfg.engines_in_use()
    }
    llm_of = {"rewrite": scfg.rewrite.engine, "synthesize": scfg.synthesize.engine}
    bound = {}
    for stage, cls in STAGE_CLASSES.items():
        deployment = serve.deployment(**deployment_options(stage, scfg.deployment(stage)))(cls)
        engine = engines.get(llm_of.get(stage, ""))
        llm = {"llm": engine} if engine is not None else {}
        bound[stage] = deployment.bind(**cls.tree_args(cfg), **llm)
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
            retriever, synthesizer = HandleRetriever(retrieve), HandleSynthesizer(synthesize)
            stages = Stages(HandleRewriter(rewrite), retriever, HandleReranker(rerank), synthesizer)
            super().__init__(config, stages, retriever.readiness, synthesizer.llm_state)

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
