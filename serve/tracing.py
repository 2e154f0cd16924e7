"""Traces. Ray Serve records the request's spans (the proxy's, and one per deployment call), honours an
incoming W3C `traceparent` and carries the context across deployments; ours hang inside them: the
pipeline's stages, each retrieval arm, the LLM generation. Off by default (`serve.traces.enabled`); on,
spans go over OTLP/HTTP to what the standard `OTEL_EXPORTER_OTLP_*` variables name. With tracing off the
tracer is OpenTelemetry's no-op one, so the spans below cost nothing."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from opentelemetry import trace
from opentelemetry.trace import Span, Status, StatusCode

from cluster.config import TracesConfig

EXPORTER_IMPORT_PATH = "serve.tracing:otlp_span_processors"
TRACER_NAME = "ragc"


def otlp_span_processors() -> list[Any]:
    """Serve's exporter hook (it calls this in every replica and proxy): batched OTLP/HTTP export."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    return [BatchSpanProcessor(OTLPSpanExporter())]


def tracing_env(cfg: TracesConfig) -> dict[str, str]:
    """What the Ray cluster's processes need in their environment: Serve's HTTP proxy reads only these
    (it is not given `serve.start`'s tracing config in Ray 2.60), and without its span a caller's
    `traceparent` is not honoured. Set before Ray starts (the local host), or on the Ray pods (the chart)."""
    if not cfg.enabled:
        return {}
    return {
        "RAY_SERVE_TRACING_EXPORTER_IMPORT_PATH": EXPORTER_IMPORT_PATH,
        "RAY_SERVE_TRACING_SAMPLING_RATIO": f"{cfg.sampling_ratio:g}",
    }


def serve_tracing_config(cfg: TracesConfig) -> dict[str, Any]:
    """`serve.start(tracing_config=...)` and the Serve deploy config's `tracing_config`."""
    if not cfg.enabled:
        return {"enabled": False}
    return {"enabled": True, "exporter_import_path": EXPORTER_IMPORT_PATH, "sampling_ratio": cfg.sampling_ratio}


@contextmanager
def span(name: str, **attributes: str | int | float | bool | None) -> Iterator[Span]:
    """A child of the current span (Serve's, in a replica), named `ragc.<name>`; None attributes are left out."""
    tracer = trace.get_tracer(TRACER_NAME)
    kept = {f"ragc.{k}": v for k, v in attributes.items() if v is not None}
    with tracer.start_as_current_span(f"ragc.{name}", attributes=kept) as current:
        yield current


def detached_span(name: str, **attributes: str | int | float | bool | None) -> Span:
    """A child of the current span that is not made current: for an async generator, whose body runs in its
    callers' contexts (a current span there would be detached in the wrong one). The caller ends it."""
    kept = {f"ragc.{k}": v for k, v in attributes.items() if v is not None}
    return trace.get_tracer(TRACER_NAME).start_span(f"ragc.{name}", attributes=kept)


def record(current: Span, status: str, **attributes: str | int | float | bool | None) -> None:
    """A stage's outcome on its span: its status, and an error status for `error`/`fallback`."""
    current.set_attribute("ragc.status", status)
    for key, value in attributes.items():
        if value is not None:
            current.set_attribute(f"ragc.{key}", value)
    if status in ("error", "fallback"):
        current.set_status(Status(StatusCode.ERROR, str(attributes.get("detail") or status)))
