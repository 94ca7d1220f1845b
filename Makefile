# The two commands the README opens with: `make demo` and `make test`. Both set up from nothing.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint unit services-up services-down clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e ".[dev]"
	touch $(STAMP)

services-up: $(STAMP)
	$(BIN)/ticdc-sink services up

services-down: $(STAMP)
	$(BIN)/ticdc-sink services down

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

# Lint, then every test: unit and integration, against the real local services.
test: lint services-up
	$(BIN)/pytest

unit: $(STAMP)
	$(BIN)/pytest -m "not integration"

demo: services-up
	$(BIN)/ticdc-sink demo

clean: services-down
	rm -rf .ticdc-sink $(VENV)
