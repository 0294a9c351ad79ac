# Two commands do all the set-up on a fresh machine:
#   make demo   - the main job: a real MCP client session against `nsight-agent serve`
#   make test   - lint, type-check and the test suite (CPU-only machines run everything but `gpu` tests)
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: venv test lint demo gpu-test bench benchmarks-doc clean

$(BIN)/nsight-agent: pyproject.toml scripts/setup-venv
	PY=$(PY) bash scripts/setup-venv $(VENV)
	touch $@

venv: $(BIN)/nsight-agent

lint: venv
	$(BIN)/ruff check nsight_agent tests examples bench scripts
	$(BIN)/ruff format --check nsight_agent tests examples bench scripts
	$(BIN)/mypy

test: lint
	$(BIN)/python -m pytest -q -n $${PYTEST_WORKERS:-auto} --dist loadgroup

demo: venv
	$(BIN)/python -m nsight_agent.demo

gpu-test: venv
	bash scripts/gpu-check

# The bench suites on a machine with a GPU (docs/TESTING.md): make bench SUITES="perf prelaunch"
SUITES ?= all
bench: venv
	$(BIN)/python -m bench run $(SUITES)

# docs/BENCHMARKS.md from the newest results in bench/results
benchmarks-doc: venv
	$(BIN)/python -m bench docs

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache

# Mutation testing of the modules that judge (docs/TESTING.md). Slow (minutes a module on two
# cores), so not part of `make test`. One module: make mutate MODULES=nsight_agent/request.py
.PHONY: mutate
mutate: venv
	bash scripts/mutate $(MODULES)
