# The README's two commands: `make demo` (whole DVC pipeline on the embedded default)
# and `make test` (the test suite). Both create .venv/ from this repository's own files.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
export GX_ANALYTICS_ENABLED := False
export DVC_NO_ANALYTICS := 1
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export PATH := $(CURDIR)/$(BIN):$(PATH)
# The demo's owner key (keyed release noise, export signatures): outside git and DVC outputs.
OWNER_KEY ?= $(CURDIR)/.mass/owner.key
# Names the key's path (never the key) for `mass` run by `dvc repro`/`dvc exp run` from a plain
# shell (mass/keys.py); git-ignored like the key.
LOCAL_CONFIG := .mass/local.yaml

.PHONY: venv chromium demo demo-keys test test-fast mutation lint clean-demo

$(BIN)/.installed: pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	# torch first and exactly: the CPU wheel on disk; a looser pin pulls GBs of CUDA.
	$(BIN)/python -m pip install -q torch==2.13.0
	$(BIN)/python -m pip install -q -c constraints.txt -e '.[dev,text,bench]'
	touch $@

venv: $(BIN)/.installed

$(OWNER_KEY): | venv
	mkdir -p $(dir $(OWNER_KEY)) && chmod 700 $(dir $(OWNER_KEY))
	$(BIN)/mass keygen $(OWNER_KEY)

$(LOCAL_CONFIG): | $(OWNER_KEY)
	printf '%s\n' '# written by `make demo`; git-ignored; the key paths mass reads (mass/keys.py)' \
		'noise_key_file: $(OWNER_KEY)' 'signing_key_file: $(OWNER_KEY)' > $@

# the demo's set-up without the pipeline: then `.venv/bin/dvc repro` / `exp run` from any shell
demo-keys: $(OWNER_KEY) $(LOCAL_CONFIG)

# Ends with a short summary read from reports/audit/audit.json (mass/demo/summary.py): the
# release, its rows, the audit verdict, each suppressed attribute's worst attacker and bound
# against its limit, each preserved one's kept fraction. Also printed when this run's audit
# failed (the audit.json is newer than the run's start), then make fails with dvc's status.
DEMO_SUMMARY = $(BIN)/python -m mass.demo.summary --audit reports/audit/audit.json \
	--release release --report reports/audit/report.html --owner-key $(OWNER_KEY)

demo: venv demo-keys
	@start=$$(date +%s); $(BIN)/dvc repro || { status=$$?; echo; \
		[ -f reports/audit/audit.json ] && [ $$(stat -c %Y reports/audit/audit.json) -ge $$start ] \
		&& $(DEMO_SUMMARY); exit $$status; }
	@echo
	@$(DEMO_SUMMARY)

# tests/mass/report open the audit page in Debian's headless chromium (required when CI is set;
# CI runs as root). apt-get update + install took about 45 s on a fresh machine.
chromium:
	command -v chromium >/dev/null || (apt-get update && apt-get install -y chromium)

# --durations: the slowest tests at the end of every run (the suite's length is watched in
# docs/journal/timings.md)
test: lint chromium
	$(BIN)/python -m pytest -q --durations=25 tests

test-fast: venv
	$(BIN)/python -m pytest -q -m "not slow" tests

# on demand (not in `make test`): hand-made mutants of the critical code -> docs/mutation.md
# (`make mutation MUTANTS="name ..."` runs some; names: tests/mutation/run.py --list)
mutation: venv
	PYTHONPATH=$(CURDIR) $(BIN)/python tests/mutation/run.py $(MUTANTS)

# ruff lint + format (every file) and mypy on the public API modules
# on the public API (docs/contracts.md: readers, keys, noise, errors, config)
LINT_PATHS := mass transforms beam_pipelines tests bench examples tools
MYPY_API := mass/io.py mass/embeddings.py mass/noise.py mass/keys.py mass/errors.py \
	mass/config.py mass/digest.py mass/rows.py mass/fs.py mass/rundir.py mass/branch_models.py \
	mass/api/__init__.py mass/api/suppressor.py mass/api/report.py mass/api/frames.py \
	transforms/api.py
lint: venv
	$(BIN)/ruff check $(LINT_PATHS)
	$(BIN)/ruff format --check $(LINT_PATHS)
	$(BIN)/mypy $(MYPY_API)

clean-demo:
	rm -rf data models runs release reports triton_models/mnist_cnn triton_models/mass_modifier
