# ragsite — one command to run, one to test. See README.md.
SHELL := /bin/bash
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
HOST ?= 127.0.0.1
PORT ?= 8000
MILVUS_PORT ?= 19530
CJK_FONT := /usr/share/fonts/truetype/wqy/wqy-microhei.ttc

.PHONY: run test eval bench bench-ingest bench-retrieval bench-chat bench-answers bench-load bench-serve bench-embedding bench-federation setup install-dev migrate bootstrap fonts messages clean help

help:
	@echo "make run    — install, migrate, load the demo knowledge base and start web + worker + Milvus Lite"
	@echo "make test   — install dev requirements and run the whole test suite"
	@echo "make eval   — evaluate retrieval (ablation) and answers on the demo knowledge base's questions"
	@echo "make bench  — benchmarks (ingestion, retrieval); results in bench-results/"

$(PY):
	@command -v $(PYTHON) >/dev/null || { echo "需要 Python 3.11（$(PYTHON)）。"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip

$(VENV)/.installed-base: requirements/base.txt | $(PY)
	$(PIP) install --quiet -r requirements/base.txt
	touch $@

$(VENV)/.installed-dev: requirements/base.txt requirements/production.txt requirements/dev.txt | $(PY)
	$(PIP) install --quiet -r requirements/dev.txt
	touch $@ $(VENV)/.installed-base

setup: $(VENV)/.installed-base fonts messages

install-dev: $(VENV)/.installed-dev fonts messages

# The demo PDFs embed a CJK font; without it their pages render blank and OCR finds nothing.
fonts:
	@if [ ! -f "$(CJK_FONT)" ] && [ -z "$$RAGSITE_CJK_FONT" ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    apt-get install -y -qq fonts-wqy-microhei >/dev/null || { apt-get update -qq && apt-get install -y -qq fonts-wqy-microhei >/dev/null; }; \
	  elif command -v sudo >/dev/null && command -v apt-get >/dev/null; then \
	    sudo apt-get install -y -qq fonts-wqy-microhei >/dev/null; \
	  else echo "请安装中文字体 fonts-wqy-microhei，或用 RAGSITE_CJK_FONT 指定一个 TTF/TTC 字体文件。"; exit 1; fi; \
	fi

# English translations; Chinese is the source language and works without compiled catalogs.
messages: $(PY)
	@$(PY) scripts/compile_messages.py

migrate: setup
	$(PY) manage.py migrate --noinput

# The demo's evaluation set is imported once and becomes the demo's default if it has none, so the
# next publish runs the release check; a default staff chose stays.
bootstrap: migrate
	$(PY) manage.py bootstrap
	$(PY) manage.py import_eval_set --demo --kb demo --default --if-new

run: bootstrap
	@echo ""
	@echo "  问答页面:  http://$(HOST):$(PORT)/"
	@echo "  管理后台:  http://$(HOST):$(PORT)/admin/"
	@echo "  API 文档:  http://$(HOST):$(PORT)/api/docs/"
	@echo ""
	HOST=$(HOST) WEB_PORT=$(PORT) MILVUS_PORT=$(MILVUS_PORT) $(VENV)/bin/honcho -f Procfile start

test: install-dev
	$(VENV)/bin/pytest $(PYTEST_ARGS)

# The demo knowledge base's own questions: retrieval ablation and answer evaluation (local provider).
eval: bootstrap
	$(PY) manage.py import_eval_set --demo --kb demo --default
	$(PY) manage.py evaluate_retrieval --eval-set demo --kb demo --ablation
	$(PY) manage.py evaluate_answers --eval-set demo --kb demo

bench: bench-ingest bench-retrieval bench-chat
	$(PY) -m benchmarks.summary

bench-ingest: install-dev
	$(PY) -m benchmarks.ingest $(BENCH_INGEST_ARGS)

# BENCH_RETRIEVAL_ARGS="--sizes 1000000 --queries 100" for the million-chunk run: about 75 minutes on
# 2 cores (8 to embed with the hashing embedder, an hour to upsert into Milvus Lite).
bench-retrieval: install-dev
	$(PY) -m benchmarks.retrieval $(BENCH_RETRIEVAL_ARGS)

# BENCH_CHAT_ARGS=--quick for a run of under ~3 minutes; see `python -m benchmarks.chat --help`.
bench-chat: install-dev
	$(PY) -m benchmarks.chat $(BENCH_CHAT_ARGS)

# BENCH_ANSWERS_ARGS e.g. "--limit 100 --unanswerable 0"; see `python -m benchmarks.answer_quality --help`.
bench-answers: install-dev
	$(PY) -m benchmarks.answer_quality $(BENCH_ANSWERS_ARGS)

# Not part of `make bench`: a few minutes by default. SOAK=600 adds a 10-minute soak, RAMP=1 the ramp
# above capacity; BENCH_LOAD_ARGS for the rest (`python -m benchmarks.load --help`).
bench-load: install-dev
	$(PY) -m benchmarks.load $(if $(SOAK),--soak $(SOAK)) $(if $(RAMP),--ramp) $(BENCH_LOAD_ARGS)

# Not part of `make bench`: streaming answers of a fake real-speed model, 50 … 1,000 at once, on
# PostgreSQL, with one web process and then two behind one port (~15 minutes; see
# `python -m benchmarks.serve --help`, e.g. BENCH_SERVE_ARGS="--levels 50,100 --processes 1").
bench-serve: install-dev
	$(PY) -m benchmarks.serve $(BENCH_SERVE_ARGS)

# Not part of `make bench`: the local e5 embedder's throughput and the quality it keeps, per engine
# (~10 minutes; `python -m benchmarks.embedding --help`).
bench-embedding: install-dev
	$(PY) -m benchmarks.embedding $(BENCH_EMBEDDING_ARGS)

# Not part of `make bench`: one question over 30 knowledge bases against one, on the CMRC passages
# with the default embedder (~10 minutes; `python -m benchmarks.federation --help`).
bench-federation: install-dev
	$(PY) -m benchmarks.federation $(BENCH_FEDERATION_ARGS)

clean:
	rm -rf var bench-results .pytest_cache
