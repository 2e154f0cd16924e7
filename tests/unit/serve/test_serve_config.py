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
