# Two commands from a fresh machine with Python 3.10+ and make: `make train`, `make test`.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
RUN    ?= runs/a2c-cartpole

.PHONY: install train test test-quick test-sb3 lint docs bench clean

# Installs the tested versions (constraints.txt), so the README's figures reproduce.
$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -c constraints.txt -e ".[test,docs]"
	touch $(STAMP)

install: $(STAMP)

train: $(STAMP)
	$(VENV)/bin/pgrad-train --agent a2c --env CartPole-v1 --total-steps 150000 --seed 0 \
		--stop-at-return 475 --out $(RUN) --overwrite
	$(VENV)/bin/pgrad-evaluate $(RUN) --episodes 20
	@echo "The run is in $(RUN)/ (learning_curve.png, episodes.csv, eval.json, policy/); \
	TensorBoard: $(VENV)/bin/tensorboard --logdir runs; the commands: source $(VENV)/bin/activate"

test: $(STAMP)  # everything, on both cores (pytest-xdist; each worker one TensorFlow thread)
	$(PY) -m pytest -q -n 2 --dist worksteal

test-quick: $(STAMP)  # unit and property tests on both cores (pytest-xdist)
	$(PY) -m pytest -q -n 2 --dist worksteal -m "not slow and not subprocess and not sb3"

# Opt-in: the side-by-side tests need Stable-Baselines3, which pulls PyTorch (a CPU build first,
# where one is on disk: pip install torch==2.13.0; else PyPI's default, several GB).
test-sb3: $(STAMP)
	$(PY) -m pip install --quiet torch==2.13.0 || true
	$(PY) -m pip install --quiet -c constraints.txt -e ".[test,bench]"
	$(PY) -m pytest -q -m sb3

lint: $(STAMP)
	$(PY) -m ruff check pgrad agents pgrad_app scripts tests examples docs/hooks.py
	$(PY) -m pytest -q tests/contracts  # the import contract (layers) and an inert import pgrad
	$(PY) -m mypy  # the floors listed in pyproject.toml's [tool.mypy] files
	d=$$(mktemp -d) && NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --quiet -d $$d \
		&& rm -rf $$d  # the documentation site: a broken link, anchor or page fails

# The documentation site into site/ (mkdocs.yml; strict: a broken link, anchor or page fails).
# Preview it with: $(VENV)/bin/mkdocs serve
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict -d site

bench: $(STAMP)
	$(PY) scripts/bench.py

clean:
	rm -rf $(VENV) runs site
