"""The Serve deploy config rendered from the tree."""

from __future__ import annotations

from cluster.config import RagcConfig


def test_serve_config_is_a_valid_serve_deploy_schema() -> None:
    from ray.serve.config import AutoscalingConfig
    from ray.serve.schema import ServeDeploySchema

    from serve.serve_config import serve_deploy_config

    cfg = RagcConfig.model_validate({"serve": {"deployments": {"rerank": {"max_replicas": 7}}}})
    rendered = serve_deploy_config(cfg)
    ServeDeploySchema.model_validate(rendered)
    deployments = {d["name"]: d for d in rendered["applications"][0]["deployments"]}
    assert set(deployments) == {"ingress", "rewrite", "retrieve", "rerank", "synthesize", "llm_default"}
    no_llm = RagcConfig.model_validate({"serve": {"llm": {"enabled": False}}})
    assert "llm_default" not in {d["name"] for d in serve_deploy_config(no_llm)["applications"][0]["deployments"]}
    for options in deployments.values():
        AutoscalingConfig(**options["autoscaling_config"])
    assert deployments["rerank"]["autoscaling_config"]["max_replicas"] == 7


def test_a_partial_deployment_block_keeps_its_stage_defaults() -> None:
    cfg = RagcConfig.model_validate(
        {
            "serve": {
                "deployments": {"rerank": {"max_replicas": 7}},
                "llm": {"engines": {"default": {"deployment": {"num_cpus": 0}}}},
            }
        }
    )
    rerank = cfg.serve.deployments["rerank"]
    assert (rerank.max_replicas, rerank.target_ongoing_requests, rerank.max_ongoing_requests) == (7, 8.0, 32)
    engine = cfg.serve.llm.engines["default"].deployment
    assert (engine.num_cpus, engine.max_replicas, engine.target_ongoing_requests) == (0.0, 1, 8.0)
    assert cfg.serve.deployments["ingress"].max_replicas == 4, "a stage not named keeps all its defaults"


def test_a_stage_can_keep_its_replicas_on_separate_nodes() -> None:
    """`max_replicas_per_node: 1` with two replicas: losing a node never takes the stage's last one. Unset, the
    option is left out, and Serve places replicas as it likes."""
    from ray.serve.schema import ServeDeploySchema

    from serve.serve_config import serve_deploy_config

    spread = {"min_replicas": 2, "max_replicas_per_node": 1}
    cfg = RagcConfig.model_validate({"serve": {"deployments": {"retrieve": spread}}})
    rendered = serve_deploy_config(cfg)
    ServeDeploySchema.model_validate(rendered)
    deployments = {d["name"]: d for d in rendered["applications"][0]["deployments"]}
    assert deployments["retrieve"]["max_replicas_per_node"] == 1
    assert deployments["retrieve"]["autoscaling_config"]["min_replicas"] == 2
    assert "max_replicas_per_node" not in deployments["rerank"]
