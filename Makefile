# Two commands from a fresh machine with Python 3.10+ and make: `make train`, `make test`.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
# Installs the tested versions (constraints.txt), so the README's figures reproduce; -qq keeps
# pip's errors and drops the rest (setuptools' notes on the editable install among them).
PIP    := $(PY) -m pip install --quiet --quiet -c constraints.txt
RUN    ?= runs/a2c-cartpole
MKDOCS := NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict

# One stamp per layer, so the layer one target installed never stands in for another's:
# CORE: pgrad and its runtime dependencies (make train, make install);
# DOCS: the core and the docs extra (make docs);
# STAMP: the core, the test and the docs extras, every runtime extra among them (make test,
# make lint: what CI runs). It holds the other two layers, so it marks them installed too.
CORE   := $(VENV)/.installed-core
DOCS   := $(VENV)/.installed-docs
STAMP  := $(VENV)/.installed

.PHONY: install train test test-quick test-sb3 lint docs bench clean requirements

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

# TensorFlow's build for the core and docs layers: its CPU build (tensorflow-cpu: the same
# version and `tensorflow` module, 1.3 GB installed against 1.9 GB) where no NVIDIA GPU answers,
# else the full one. `make train TF=tensorflow` chooses the full build anywhere.
TF     ?= $(shell command -v nvidia-smi >/dev/null 2>&1 && echo tensorflow || echo tensorflow-cpu)
# pgrad's runtime requirements (plus those of the extras named in $(1)), read from its installed
# metadata, with `tensorflow` renamed to $(TF); tf-keras is left out, to be installed --no-deps,
# since it names the `tensorflow` distribution, which tensorflow-cpu provides under another name.
REQS    = $(PY) -c 'import importlib.metadata as m, re; \
	print("\n".join(re.sub(r"^tensorflow(?=[<>=!~ ;]|$$)", "$(TF)", r.split(";")[0]) \
	for r in m.requires("pgrad") if not r.startswith("tf-keras") \
	and ("extra ==" not in r or any(f"extra == \"{e}\"" in r for e in "$(1)".split()))))'

# The core and docs layers install pgrad itself without its dependencies, then those; pip's
# conflict check would name `tensorflow` (which tensorflow-cpu stands in for) as missing, in an
# ERROR line a new user takes for a failure, so these installs skip it.
LAYER  := $(PIP) --no-warn-conflicts
$(CORE): pyproject.toml constraints.txt | $(PY)
	$(LAYER) --no-deps -e .
	$(call REQS,) > $(VENV)/core-requirements.txt
	$(LAYER) -r $(VENV)/core-requirements.txt
	$(LAYER) --no-deps tf-keras
	touch $@

$(DOCS): $(CORE)
	$(call REQS,docs) > $(VENV)/docs-requirements.txt
	$(LAYER) -r $(VENV)/docs-requirements.txt
	touch $@

# What a layer installs, one requirement a line: make -s requirements [EXTRAS="docs"] [TF=...]
requirements:
	@$(call REQS,$(EXTRAS))

# The test layer is the full build with every extra; a CPU build a core layer put here first
# gives way to it (both own the `tensorflow` folder).
$(STAMP): pyproject.toml constraints.txt | $(PY)
	$(PY) -m pip uninstall --quiet --yes tensorflow-cpu 2>/dev/null || true
	$(PIP) -e ".[test,docs]"
	touch $@ $(CORE) $(DOCS)

install: $(CORE)  # the extras: pip install -e '.[tune]' (or all, ray, atari, ...: pyproject.toml)

train: $(CORE)
	$(VENV)/bin/pgrad-train --agent a2c --env CartPole-v1 --total-steps 150000 --seed 0 \
		--stop-at-return 475 --out $(RUN) --overwrite
	$(VENV)/bin/pgrad-evaluate $(RUN) --episodes 20
	@echo "The run is in $(RUN)/ (learning_curve.png, episodes.csv, eval.json, policy/); \
	TensorBoard: $(VENV)/bin/tensorboard --logdir runs; the commands: source $(VENV)/bin/activate"

# The 20 slowest tests are listed at the end: the suite's time is a budget (~15 min on 2 cores).
test: $(STAMP)  # everything, on both cores (pytest-xdist; each worker one TensorFlow thread)
	$(PY) -m pytest -q -n 2 --dist worksteal --durations=20

test-quick: $(STAMP)  # unit and property tests on both cores (pytest-xdist)
	$(PY) -m pytest -q -n 2 --dist worksteal -m "not slow and not subprocess and not sb3"

# Opt-in: the side-by-side tests need Stable-Baselines3, which pulls PyTorch (a CPU build first,
# where one is on disk: pip install torch==2.13.0; else PyPI's default, several GB).
test-sb3: $(STAMP)
	$(PY) -m pip install --quiet torch==2.13.0 || true
	$(PIP) -e ".[test,bench]"
	$(PY) -m pytest -q -m sb3

# The documentation site is built with its warnings shown: --strict fails the build on any of
# them (a broken link or anchor, a page outside the navigation); tests/contracts/test_docs_gate.py
# shows a planted broken link failing it.
lint: $(STAMP)
	$(PY) -m ruff check pgrad agents pgrad_app scripts tests examples docs/hooks.py
	$(PY) -m pytest -q tests/contracts  # the import contract (layers), quiet imports, the docs gate
	$(PY) -m mypy  # the floors listed in pyproject.toml's [tool.mypy] files
	d=$$(mktemp -d) && $(MKDOCS) -d $$d; status=$$?; rm -rf $$d; exit $$status

# The documentation site into site/ (mkdocs.yml; strict: a broken link, anchor or page fails).
# Preview it with: $(VENV)/bin/mkdocs serve
docs: $(DOCS)
	$(MKDOCS) -d site

bench: $(STAMP)
	$(PY) scripts/bench.py

clean:
	rm -rf $(VENV) runs site
