# HybridMQ developer commands. `make demo` and `make test` are the two that matter; both set up
# everything they need on a fresh machine (the venv, the packages, the Kubernetes binaries).
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
export PYTHONPATH := $(CURDIR)/hack$(if $(PYTHONPATH),:$(PYTHONPATH))

# The chart's and images' linters
.PHONY: lint-images lint-chart lock

lint-images: $(STAMP)
	$(VENV)/bin/hadolint Dockerfile broker-image/Dockerfile hack/kind/node/Dockerfile hack/kind/node/tools.Dockerfile
	shellcheck hack/kind-demo.sh hack/docker/*.sh hack/kind/*.sh

lint-chart: $(STAMP) k8s-binaries
	helm="$$(hack/k8sbin/build.sh)/helm" && \
	  "$$helm" lint --strict helm/hybridmq && \
	  "$$helm" lint --strict helm/hybridmq --set sampleCluster.enabled=true && \
	  "$$helm" template hybridmq helm/hybridmq --set sampleCluster.enabled=true >/dev/null
	diff -r -x kopf.dev_peerings.yaml crds helm/hybridmq/crds

lock: $(STAMP)
	$(PY) requirements/lock.py

.PHONY: test-node-loss setup system-packages docker-engine images kind kind-node-image kind-up kind-down kind-demo k8s-binaries spark-jar lint fmt test test-unit test-broker test-k8s adversarial demo cluster-up cluster-down crds bench clean

setup: system-packages $(STAMP) k8s-binaries spark-jar

# Debian packages the lint and tests use (root machines; apt-get update only when something is missing),
# and docker.io when no Docker engine answers and dockerd is missing.
system-packages:
	@command -v shellcheck >/dev/null || (apt-get update -qq && apt-get install -y -qq shellcheck)
	@hack/docker/engine.sh install

# The project's Docker engine (reused when one answers; see hack/docker/engine.sh stop to stop ours).
docker-engine: system-packages
	@hack/docker/engine.sh start

# Both images from the repository's Dockerfiles (base image made here when no registry has it).
images: docker-engine
	hack/docker/build-images.sh

$(STAMP): pyproject.toml operator/pyproject.toml
	python3 -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	$(VENV)/bin/pip install -q -e '.[operator,spark,dev]' -e ./operator
	touch $(STAMP)

k8s-binaries:
	@hack/k8sbin/build.sh >/dev/null

# The JVM data source hybridmq-export, compiled against the installed pyspark into a cached jar.
spark-jar: $(STAMP)
	@$(PY) -m hybridmq.spark.jar >/dev/null

# kind from source (pinned), into ~/.cache/hybridmq/kind/; see hack/kind/README.md for the node image.
kind:
	@hack/kind/build.sh

# The kind node image made here (hack/kind/node-image.sh; cached: seconds once built).
kind-node-image: docker-engine k8s-binaries
	@hack/kind/node-image.sh

# A kind cluster from that image: 1 control-plane + KIND_WORKERS (default 3) workers.
kind-up: kind-node-image
	@hack/kind/cluster.sh up

kind-down:
	@hack/kind/cluster.sh down

# The failover demo on kind, end to end (last line: the audit's verdict).
kind-demo: setup kind-node-image
	hack/kind-demo.sh

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports
	$(MAKE) --no-print-directory lint-images lint-chart

fmt: $(STAMP)
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

# The suite in TEST_WORKERS pytest-xdist workers (default 4: about 19 min on the 2 cores, as most tests
# wait on brokers, leases and pods and four overlap their waits; 0 runs it in this one process, about
# 42 min). Tests that share a control plane stay together in one worker, and so do the images, kind
# and Spark, which must not run side by side (tests/suite_schedule.py). Then the `solo` tests, alone:
# they compare latencies with a quiet baseline, which other tests' load makes a coin toss, or fail
# real MM processes over on leases and heartbeats that the suite's load lets lapse.
TEST_WORKERS ?= 4
test: setup
	HYBRIDMQ_TESTS_RECORD=main $(VENV)/bin/pytest -n $(TEST_WORKERS) --dist loadgroup -m "not solo" \
	  -ra --durations=20 tests
	HYBRIDMQ_TESTS_RECORD=solo $(VENV)/bin/pytest -m solo -ra tests

# The kind node-loss test alone (stops a worker container; `make test` runs it last of the kind tests)
test-node-loss: setup
	$(VENV)/bin/pytest -ra -m node_loss tests/kind

test-unit: $(STAMP)
	$(VENV)/bin/pytest -ra tests/unit

test-broker: $(STAMP)
	$(VENV)/bin/pytest -ra tests/broker

# The adversarial suite, long (default 300 s; HYBRIDMQ_ADVERSARIAL_SECONDS and _SEED override), then
# the model-based tests (queue semantics, planner convergence) with ten times their examples.
MODEL_TESTS := tests/unit/test_queue_model.py tests/unit/test_planner_convergence.py tests/broker/test_queue_model_live.py
adversarial: $(STAMP)
	HYBRIDMQ_ADVERSARIAL_SECONDS=$${HYBRIDMQ_ADVERSARIAL_SECONDS:-300} $(VENV)/bin/pytest -ra -s tests/adversarial
	HYBRIDMQ_MODEL_EXAMPLES=$${HYBRIDMQ_MODEL_EXAMPLES:-300} $(VENV)/bin/pytest -ra $(MODEL_TESTS)

test-k8s: setup
	$(VENV)/bin/pytest -ra tests/k8s tests/e2e

crds: $(STAMP)
	$(PY) -m hybridmq.api.crdgen crds/
	find helm/hybridmq/crds -name '*.yaml' ! -name kopf.dev_peerings.yaml -delete
	cp crds/*.yaml helm/hybridmq/crds/

cluster-up: setup
	$(PY) -m localcluster up --dir .localcluster

cluster-down: $(STAMP)
	$(PY) -m localcluster down --dir .localcluster

demo: setup
	$(PY) -m hybridmq_demo

bench: $(STAMP)
	$(PY) bench/throughput.py

clean:
	rm -rf .localcluster .pytest_cache .mypy_cache .ruff_cache
