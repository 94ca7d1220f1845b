# The two commands the README opens with: `make demo` and `make test`. Both set up from nothing.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint unit fuzz dist services-up services-up-secure services-down clean

# rustup installs cargo here; the native codecs need it (without it the Python codecs serve alone).
export PATH := $(HOME)/.cargo/bin:$(PATH)

# The native codecs' abi3 wheel into the folder named after it, built by this virtualenv's maturin
# with its Python, so that each build after the first reuses cargo's compiled crates.
NATIVE_WHEEL = $(BIN)/maturin build --release --manifest-path native/Cargo.toml \
	--interpreter $(BIN)/python --out
NATIVE_WHEELS := native/target/wheels

$(STAMP): pyproject.toml native/pyproject.toml native/Cargo.toml $(wildcard native/src/*.rs)
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e ".[dev]"
	if command -v cargo > /dev/null; then rm -rf $(NATIVE_WHEELS) && $(NATIVE_WHEEL) $(NATIVE_WHEELS) \
		&& $(BIN)/pip install -q --force-reinstall --no-deps $(NATIVE_WHEELS)/*.whl; \
	else echo "no Rust toolchain (cargo): the pure-Python codecs only"; fi
	touch $(STAMP)

# What users install (README, Install): the sdist of ticdc-sink and its wheel (built from the
# sdist, so the sdist is proven whole), and the native codecs' one abi3 wheel when cargo is there.
DIST ?= dist
dist: $(STAMP)
	rm -f $(DIST)/ticdc_sink-* $(DIST)/ticdc_sink_native-*
	# An sdist takes in every file an earlier build's egg-info lists: only pyproject.toml's count.
	rm -rf ticdc_sink.egg-info
	$(BIN)/python -m build --outdir $(DIST) .
	if command -v cargo > /dev/null; then $(NATIVE_WHEEL) $(DIST); \
	else echo "no Rust toolchain (cargo): no native wheel, the pure-Python codecs only"; fi

services-up: $(STAMP)
	$(BIN)/ticdc-sink services up

# The tests also replicate through TLS/SASL-secured copies of Kafka, MariaDB and Redis.
services-up-secure: $(STAMP)
	$(BIN)/ticdc-sink services up --secure

services-down: $(STAMP)
	$(BIN)/ticdc-sink services down

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports --no-cache
	if command -v cargo > /dev/null; then cd native && cargo fmt --check \
		&& cargo clippy --release --quiet -- -D warnings && cargo test --release --quiet; fi

# Lint, then every test: unit and integration, against the real local services, the secured
# copies, TiDB, the schema registry (the demo needs neither TiDB nor the registry; the tests
# replicate into TiDB and read Avro schemas from the registry) and the clusters.
test: lint $(STAMP)
	$(BIN)/ticdc-sink services up --secure --tidb --registry --cluster
	$(BIN)/pytest

unit: $(STAMP)
	$(BIN)/pytest -m "not integration"

# The differential fuzz of the codecs, long budget: mutations of every protocol's real TiCDC
# messages, native against Python; a table of what happened, exit 1 on any finding. Then the
# structural fuzz of every protocol with a grammar (tests/streams/codecs/structure/: messages
# generated from it, their structure mutated, judged by the grammar and both decoders). Then the model of the whole sink loop
# (tests/spark_sink/test_loop_model.py), long budget, against the local MariaDB and TiDB
# (`services up --tidb`).
FUZZ_MUTATIONS ?= 100000
FUZZ_STRUCTURE_CASES ?= 100000
SINK_LOOP_EXAMPLES ?= 200
fuzz: $(STAMP)
	$(BIN)/python -m tests.streams.codecs.fuzz --mutations $(FUZZ_MUTATIONS)
	$(BIN)/python -m tests.streams.codecs.structure --cases $(FUZZ_STRUCTURE_CASES)
	SINK_LOOP_EXAMPLES=$(SINK_LOOP_EXAMPLES) $(BIN)/pytest -p no:cacheprovider \
		tests/spark_sink/test_loop_model.py

demo: services-up
	$(BIN)/ticdc-sink demo

clean: services-down
	rm -rf .ticdc-sink $(VENV)
