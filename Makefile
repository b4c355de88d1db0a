# Two commands a new user needs: `make demo` (the main job) and `make test`.
# Both create .venv with a Python 3.10–3.12 found on PATH and install fedort into it.
PY ?= $(shell for p in python3.12 python3.11 python3.10 python3; do \
	$$p -c 'import sys; sys.exit(not (3, 10) <= sys.version_info[:2] < (3, 13))' >/dev/null 2>&1 && echo $$p && break; done)
VENV ?= .venv
BIN := $(VENV)/bin
RUN ?= runs/demo

WEB := edge_client/web

.PHONY: demo test test-fast lint typecheck bench protos web clean

demo: $(VENV)/.demo-installed
	rm -rf $(RUN)
	$(BIN)/fedort simulate digits_dirichlet --out $(RUN)

# everything: the Python suite over both cores (pytest-xdist), then the TypeScript client's own tests
test: $(VENV)/.installed web
	$(BIN)/python -m pytest -n 2
	@if command -v npm >/dev/null; then cd $(WEB) && FEDORT_CLI=$(abspath $(BIN))/fedort npm test; \
	else echo "npm not found: skipping the TypeScript client's own tests (edge_client/web)"; fi

# The TypeScript web client (edge_client/web): its packages from the lockfile, then dist/ (the page the
# coordinator's web port serves, the Node device). Skipped without npm; its Python-side tests then skip too.
web:
	@if command -v npm >/dev/null; then \
		test $(WEB)/node_modules/.installed -nt $(WEB)/package-lock.json || \
			(cd $(WEB) && npm ci --no-audit --no-fund && touch node_modules/.installed) && \
		(cd $(WEB) && npm run build); \
	else echo "npm not found: not building the web client (edge_client/web)"; fi

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

# mypy over the product code (not tests, benchmarks or the generated stubs); configured in pyproject's [tool.mypy]
typecheck: $(VENV)/.installed
	PYTHON=$(BIN)/python tools/typecheck.sh

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
