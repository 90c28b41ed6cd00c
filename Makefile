# The two commands for a fresh machine (see README.md):
#   make run    install everything, start JupyterLab with the extension on the local backend
#   make test   install everything, run the whole test suite
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
ALLOW_ROOT := $(if $(filter 0,$(shell id -u)),--allow-root,)
SUDO := $(if $(filter 0,$(shell id -u)),,sudo )
CHROMIUM := /usr/bin/chromium

.PHONY: install run test

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

$(CHROMIUM):  # the browser the panel's tests drive (Playwright cannot download one here)
	$(SUDO)apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO)apt-get install -y -qq chromium

install: $(BIN)/python
	$(BIN)/pip install --quiet ".[test,examples]"

run: install
	$(BIN)/jupyter lab $(ALLOW_ROOT) --ServerApp.root_dir=$(CURDIR)/examples

test: install $(CHROMIUM)
	tests/controlplane/build.sh  # the Kubernetes control plane the backend's tests run against
	$(BIN)/mypy  # the package's types ([tool.mypy] in pyproject.toml)
	$(BIN)/pytest
