# The two commands for a fresh machine (see README.md):
#   make run    install everything, start JupyterLab with the extension on the local backend
#   make test   install everything, run the whole test suite
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
ALLOW_ROOT := $(if $(filter 0,$(shell id -u)),--allow-root,)
SUDO := $(if $(filter 0,$(shell id -u)),,sudo )
CHROMIUM := /usr/bin/chromium

.PHONY: install run test real-node-packages

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

$(BIN)/uv: $(BIN)/python  # installs the rest from its cache (~/.cache/uv) in about a minute, where pip took five
	$(BIN)/pip install --quiet uv

$(CHROMIUM):  # the browser the panel's tests drive (Playwright cannot download one here)
	$(SUDO)apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO)apt-get install -y -qq chromium

# the real node's parts (tests/controlplane/realnode.py): the container runtime, the pods' network, the images' tools
REAL_NODE_PACKAGES := containerd runc containernetworking-plugins iptables debootstrap umoci socat
real-node-packages:
	dpkg -s $(REAL_NODE_PACKAGES) >/dev/null 2>&1 || ($(SUDO)apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive $(SUDO)apt-get install -y -qq --no-install-recommends $(REAL_NODE_PACKAGES))

install: $(BIN)/uv
	$(BIN)/uv pip install --quiet --compile-bytecode --python $(BIN)/python --reinstall-package jupyter-distrain \
	  ".[test,examples]"  # compiled as pip does: with PYTHONDONTWRITEBYTECODE set, each process would compile TensorFlow

run: install
	$(BIN)/jupyter lab $(ALLOW_ROOT) --ServerApp.root_dir=$(CURDIR)/examples

test: install $(CHROMIUM) real-node-packages
	tests/controlplane/build.sh  # the Kubernetes control plane the backend's tests run against
	$(BIN)/mypy  # the package's types ([tool.mypy] in pyproject.toml)
	@# two pytest processes side by side (tests/conftest.py, lane_of): the real node's tests and its hub's (mostly
	@# waiting on pods) with long tests on the local backend, and the rest; the first's report, kept in
	@# test-artifacts/node.log, follows the rest's
	mkdir -p test-artifacts; $(BIN)/pytest --lane node > test-artifacts/node.log 2>&1 & node=$$!; \
	$(BIN)/pytest --lane rest; rest=$$?; wait $$node; node=$$?; cat test-artifacts/node.log; exit $$(( rest || node ))
