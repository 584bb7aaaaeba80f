# The two commands of the README:
#   make run    install synth with the Piper engine and the offline recognizer that checks each file,
#               and render examples/corpus.txt into out/sample
#   make test   install everything the tests need and run the whole suite
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
# The tests run the Orpheus engine on the CPU. torch 2.13.0 is pinned so pip takes the CPU build
# (this project's CI machines carry its wheel); GPU hosts install their CUDA build instead.
TORCH  ?= torch==2.13.0
# Test processes (pytest-xdist): most tests wait on the processes they start (a worker, an API,
# Redis), so two keep a two-core machine busy where one left it half idle. Each takes its own
# Redis database (tests/conftest.py) and PostgreSQL database.
TEST_PROCESSES ?= 2

.PHONY: run test format install install-test clean chromium

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

$(VENV)/.run-installed: pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e '.[piper,verify]'
	touch $@

$(VENV)/.test-installed: pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q '$(TORCH)'
	$(BIN)/pip install -q -e '.[piper,orpheus,gpu,api,reports,verify,dev]' '$(TORCH)'
	touch $@ $(VENV)/.run-installed

install: $(VENV)/.run-installed
install-test: $(VENV)/.test-installed

run: $(VENV)/.run-installed
	$(BIN)/synth submit examples/corpus.txt --format mp3 --name sample -o out/sample

# The dashboard test drives Debian's headless chromium; install it when missing (needs root + apt).
chromium:
	@command -v chromium >/dev/null || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium; } \
	  || echo "chromium missing and not installable here: the dashboard browser test will skip"

test: $(VENV)/.test-installed chromium
	$(BIN)/ruff format --check .
	$(BIN)/ruff check .
	$(BIN)/mypy
	$(BIN)/python -m pytest -n $(TEST_PROCESSES) --dist loadfile

format: $(VENV)/.test-installed
	$(BIN)/ruff format .

clean:
	rm -rf $(VENV) out
