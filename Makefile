# Two commands a new user needs: `make demo` (the main job) and `make test`.
# Both create .venv with a Python 3.10–3.12 found on PATH and install fedort into it.
PY ?= $(shell for p in python3.12 python3.11 python3.10 python3; do \
	$$p -c 'import sys; sys.exit(not (3, 10) <= sys.version_info[:2] < (3, 13))' >/dev/null 2>&1 && echo $$p && break; done)
VENV ?= .venv
BIN := $(VENV)/bin
RUN ?= runs/demo

.PHONY: demo test test-fast lint bench protos clean

demo: $(VENV)/.demo-installed
	rm -rf $(RUN)
	$(BIN)/fedort simulate digits_dirichlet --out $(RUN)

test: $(VENV)/.installed
	$(BIN)/python -m pytest

# the fast tier: every test not marked `slow`, spread over the cores (pytest-xdist); under a minute
test-fast: $(VENV)/.installed
	$(BIN)/python -m pytest -m "not slow" -n auto -q

# static checks of the product code: ruff's linter and its formatter (configured in pyproject.toml)
LINTED := fedort coordinator edge_client protos simulations
lint: $(VENV)/.installed
	$(BIN)/ruff check $(LINTED)
	$(BIN)/ruff format --check $(LINTED)

bench: $(VENV)/.installed
	$(BIN)/python benchmarks/run_all.py

protos: $(VENV)/.installed
	$(BIN)/python -m fedort.protos.generate

# the demo needs only the `sim` extra (scikit-learn's digits, matplotlib's plot); the tests need `dev`
# (Ray, pytest, ...), which includes it, so a venv made for the tests serves the demo as it is
$(VENV)/.demo-installed: pyproject.toml
	@if [ -f $(VENV)/.installed ] && [ $(VENV)/.installed -nt pyproject.toml ]; then touch $@; exit 0; fi; \
	$(MAKE) --no-print-directory EXTRA=sim STAMP=$@ $(VENV)/.install-extra

$(VENV)/.installed: pyproject.toml
	@$(MAKE) --no-print-directory EXTRA=dev STAMP=$@ $(VENV)/.install-extra
	@touch $(VENV)/.demo-installed

.PHONY: $(VENV)/.install-extra
$(VENV)/.install-extra:
	@test -n "$(PY)" || { echo "fedort needs Python 3.10, 3.11 or 3.12 on PATH (onnxruntime-training 1.19.2 has no 3.13 wheels)"; exit 1; }
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e ".[$(EXTRA)]"
	@# bytecode for the editable checkout (pip compiles a wheel's modules, not these): without it, a shell with
	@# PYTHONDONTWRITEBYTECODE set compiles ~150 modules in every process of every run
	$(BIN)/python -m compileall -q fedort coordinator edge_client protos simulations
	@touch $(STAMP)

clean:
	rm -rf $(VENV) runs .pytest_cache
