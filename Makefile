# fraudlake — `make help` lists the targets. `make demo` and `make test` install what they need themselves.
SHELL := /bin/bash
.DEFAULT_GOAL := help

# Spark 4.1 needs Java 17; the machine also has a newer JDK that must not be picked up from PATH.
JAVA_HOME ?= $(firstword $(wildcard /usr/lib/jvm/java-17-openjdk-amd64 /usr/lib/jvm/java-17-openjdk* /usr/lib/jvm/temurin-17*))
export JAVA_HOME
export SPARK_LOCAL_IP ?= 127.0.0.1
export PYSPARK_PYTHON := $(CURDIR)/.venv/bin/python
# Python's bytecode cache, written and read under .work/pycache: uv installs no .pyc files, and where the environment
# sets PYTHONDONTWRITEBYTECODE (this machine does) every Python process compiled each module it imports from source
# again: a pytest worker's collection 21.4 -> 7.6 s, a `fraudlake run` process's imports 3.5-4.0 -> 1.0 s.
unexport PYTHONDONTWRITEBYTECODE
export PYTHONPYCACHEPREFIX := $(CURDIR)/.work/pycache

VENV := .venv
BIN := $(VENV)/bin
PYTEST_ARGS ?=
# Two pytest workers, whole modules each (module fixtures stay in one process): a test waiting on a broker, a
# subprocess JVM or a stop signal leaves the cores to the other worker (suite 15:57 -> 13:45 on 2 cores).
TEST_WORKERS ?= 2
XDIST := -n $(TEST_WORKERS) --dist loadfile

.PHONY: help setup jars demo test check lint typecheck dq dq-ci kafka-start kafka-stop clean

help: ## list the targets
	@grep -hE '^[a-zA-Z_-]+:.*?## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*?## "}; {printf "  %-12s %s\n", $$1, $$2}'

setup: ## create .venv with the pinned packages and copy the JVM jars from Maven Central (idempotent)
	@bash scripts/setup.sh

demo: setup ## run the main job end to end on embedded defaults (no Kafka needed)
	@$(BIN)/fraudlake demo

test: setup ## run the test suite (real Spark, Delta and a real Kafka broker)
	@$(BIN)/python -m pytest $(XDIST) $(PYTEST_ARGS)

# The inner loop: deselected by marker (pyproject.toml), never skipped. `make test` still runs everything.
FAST_MARKERS := not kafka and not subprocess and not cluster and not slow

.PHONY: test-fast
test-fast: setup ## the inner loop (< 3 min): no broker, no subprocess crash tests, no cluster, no long scenarios
	@$(BIN)/python -m pytest -m "$(FAST_MARKERS)" $(XDIST) $(PYTEST_ARGS)

check: lint typecheck ## ruff + mypy

lint: setup ## ruff lint and format check
	@$(BIN)/ruff check .
	@$(BIN)/ruff format --check .

typecheck: setup ## mypy (strict) on the packages
	@$(BIN)/mypy

.PHONY: bench
bench: setup ## benchmarks (~60 min; BENCH_ARGS=--quick for ~20) -> docs/benchmarks.md + docs/benchmarks/*.png
	@$(BIN)/fraudlake bench $(BENCH_ARGS)

.PHONY: bench-targets
bench-targets: setup ## every target of docs/benchmarks.md in one run: engine vs the floor, 100 rules, rule kinds, live latency, windows, baselines, state, transformWithState, a million payers, a retention cycle, driver memory (~15 min on 2 idle cores)
	@$(BIN)/fraudlake bench --plan targets --only throughput kinds latency windows baselines state native cycle memory $(BENCH_ARGS)

dq: setup ## data-quality suites on the lakehouse; report in <lakehouse>/_reports/dq.md, exit 1 on a failure
	@$(BIN)/fraudlake dq

dq-ci: setup ## CI: the pipeline end to end on generated data (fraudlake demo), then the dq suites on its lakehouse
	@rm -rf .work/ci-lakehouse
	@$(BIN)/fraudlake demo --lakehouse .work/ci-lakehouse --live-seconds 8 --dq

.PHONY: contract-long
contract-long: setup ## randomized engine contract runs from a random base seed (CONTRACT_EXAMPLES, default 60)
	@base=$${CONTRACT_BASE_SEED:-$$RANDOM$$RANDOM}; echo "contract-long: base seed $$base"; \
	FRAUDLAKE_CONTRACT_EXAMPLES=$${CONTRACT_EXAMPLES:-60} FRAUDLAKE_CONTRACT_BASE_SEED=$$base \
	$(BIN)/python -m pytest tests/test_engine_contract_random.py -q $(PYTEST_ARGS)

.PHONY: fuzz reliability
RELIABILITY_TESTS := tests/test_engine_recovery.py tests/test_rules_job_recovery.py tests/test_faults_concurrent.py \
	tests/test_broker_outage.py tests/test_engine_stop.py tests/test_fuzz_parsers.py tests/test_hostile_rules.py \
	tests/test_schema_drift.py

fuzz: setup ## long hypothesis runs of the CDC and transaction parsers (FUZZ_EXAMPLES, default 5000)
	@FRAUDLAKE_FUZZ_EXAMPLES=$${FUZZ_EXAMPLES:-5000} $(BIN)/python -m pytest tests/test_fuzz_parsers.py -q $(PYTEST_ARGS)

reliability: setup ## fault, concurrency and bad-input tests (one pytest run); measured table -> docs/reliability.md
	@mkdir -p .work && rm -f .work/reliability.jsonl
	@FRAUDLAKE_RELIABILITY_REPORT=$(CURDIR)/.work/reliability.jsonl $(BIN)/python -m pytest $(RELIABILITY_TESTS) \
		-q --durations=0 $(PYTEST_ARGS)
	@$(BIN)/python scripts/reliability_report.py .work/reliability.jsonl docs/reliability.md

.PHONY: chaos
chaos: setup ## fault campaign over the live path (CHAOS_SECONDS=600, CHAOS_FAULTS=3 per part, CHAOS_RATE=20, CHAOS_SEED)
	@seed=$${CHAOS_SEED:-$$RANDOM$$RANDOM}; echo "chaos: seed $$seed"; \
	$(BIN)/fraudlake chaos --seconds $${CHAOS_SECONDS:-600} --faults-per-part $${CHAOS_FAULTS:-3} \
		--rate $${CHAOS_RATE:-20} --seed $$seed $(CHAOS_ARGS)

kafka-start: setup ## start the local Kafka broker (KRaft) on 127.0.0.1
	@$(BIN)/fraudlake kafka start

kafka-stop: ## stop the local Kafka broker
	@$(BIN)/fraudlake kafka stop

.PHONY: cdc-start cdc-stop
cdc-start: setup ## the real CDC path: broker, PostgreSQL rules DB (sample rules if empty), Kafka Connect + Debezium
	@$(BIN)/fraudlake kafka start
	@$(BIN)/fraudlake rulesdb start
	@$(BIN)/fraudlake rulesdb seed --if-empty
	@$(BIN)/fraudlake connect start

cdc-stop: ## stop Kafka Connect, the rules database and the broker (their data and offsets are kept)
	@$(BIN)/fraudlake connect stop
	@$(BIN)/fraudlake rulesdb stop
	@$(BIN)/fraudlake kafka stop

clean: ## remove the work dir (lakehouse, checkpoints, broker data); keeps .venv and .jars
	rm -rf .work
