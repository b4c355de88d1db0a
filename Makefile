# Two commands a new user needs: `make demo` (the main job) and `make test`.
# Both create .venv with a Python 3.10–3.12 found on PATH and install fedort into it.
PY ?= $(shell for p in python3.12 python3.11 python3.10 python3; do \
	$$p -c 'import sys; sys.exit(not (3, 10) <= sys.version_info[:2] < (3, 13))' >/dev/null 2>&1 && echo $$p && break; done)
VENV ?= .venv
BIN := $(VENV)/bin
RUN ?= runs/demo

.PHONY: demo test bench protos typecheck clean

demo: $(VENV)/.installed
	rm -rf $(RUN)
	$(BIN)/fedort simulate simulations/scenarios/digits_dirichlet.toml --out $(RUN)

test: $(VENV)/.installed
	$(BIN)/python -m pytest

bench: $(VENV)/.installed
	$(BIN)/python benchmarks/run_all.py

# mypy over the product code (not tests, benchmarks or the generated stubs); configured in pyproject's [tool.mypy]
typecheck: $(VENV)/.installed
	PYTHON=$(BIN)/python tools/typecheck.sh

protos: $(VENV)/.installed
	$(BIN)/python -m fedort.protos.generate

$(VENV)/.installed: pyproject.toml
	@test -n "$(PY)" || { echo "fedort needs Python 3.10, 3.11 or 3.12 on PATH (onnxruntime-training 1.19.2 has no 3.13 wheels)"; exit 1; }
	$(PY) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e ".[dev]"
	@# bytecode for the editable checkout (pip compiles a wheel's modules, not these): without it, a shell with
	@# PYTHONDONTWRITEBYTECODE set compiles ~150 modules in every process of every run (~0.1 s per run)
	$(BIN)/python -m compileall -q fedort coordinator edge_client protos simulations
	@touch $@

clean:
	rm -rf $(VENV) runs .pytest_cache
