# Calibration Lab. `make lab` runs the workbook and grades it; `make test` runs every test but the fixture rebuilds.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
KERNEL := calibration-lab
PORT   ?= 8888

.PHONY: setup system lab test test-fast jupyter bench fixtures check-fixtures kit clean

setup: system $(STAMP)

# What pip cannot install: bubblewrap (the sandbox `make lab`'s grade runs student code in) and the test-only system
# packages (chromium for the browser test, its fonts, qemu-user-static for the real kernels of both families).
# As root on Debian or Ubuntu, apt-get installs the missing ones; otherwise set-up stops with the one command to run.
# `make setup SYSTEM_PACKAGES=bubblewrap` installs only what `make lab` needs; `SYSTEM_PACKAGES=` none. Not on Linux,
# none (bubblewrap is Linux only: `make lab` then says in one line that its grade runs no student code).
SYSTEM_PACKAGES ?= bubblewrap chromium fonts-dejavu-core qemu-user-static
system:
	@if [ -z "$(strip $(SYSTEM_PACKAGES))" ] || [ "$$(uname -s)" != Linux ]; then exit 0; fi; \
	if ! command -v dpkg-query >/dev/null; then command -v bwrap >/dev/null && exit 0; \
	  echo "setup: install $(SYSTEM_PACKAGES) with this system's package manager, then run make setup again"; \
	  exit 1; fi; \
	missing="$$(for p in $(SYSTEM_PACKAGES); do dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null \
	  | grep -q ' installed$$' || echo $$p; done | tr '\n' ' ' | sed 's/ $$//')"; \
	if [ -z "$$missing" ]; then exit 0; fi; \
	if ! command -v apt-get >/dev/null || [ "$$(id -u)" != 0 ]; then \
	  echo "setup: these system packages are missing; install them, then run make setup again:"; \
	  echo "  sudo apt-get install -y --no-install-recommends $$missing"; exit 1; fi; \
	echo "setup: apt-get install $$missing"; \
	apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $$missing

$(STAMP): requirements.txt pyproject.toml
	$(PYTHON) -m lab.tools.setup --venv $(VENV) --requirements requirements.txt \
	  --also '-e .[dask]'  # the grader's optional Dask extra, for its tests

# One line before the grade where the sandbox cannot run (the grade then runs no student code).
ISOLATION_NOTICE := import os, sys; from grader import sandbox as s; \
  sys.exit(0) if s.isolation() != "refused" else print("make lab: " + ( \
  "GRADER_NO_BWRAP is set" if os.environ.get(s.NO_BWRAP_ENV) else \
  "bubblewrap (/usr/bin/bwrap) is not installed (as root, make setup installs it)" if not os.path.exists(s.BWRAP) \
  else "bubblewrap is installed but cannot run here (no unprivileged user namespaces)") + \
  ", so the grade below runs no student code and those checks score 0", file=sys.stderr)

lab: setup
	@$(PY) -c '$(ISOLATION_NOTICE)'
	$(PY) -m instructor workbook

# Every test but the fixture rebuilds (`make check-fixtures`): they check the maintainers' builders, not the product.
test: setup
	$(PY) -m pytest -m "not rebuild"

# The inner loop: unit tests of lab and grader, schemas, layout and lint; no lesson run, no whole hand-in graded
# (tests/conftest.py's WHOLE_RUNS and the slow marker), a few minutes on two workers.
test-fast: setup
	$(PY) -m pytest -m "not slow and not browser"

jupyter: setup
	$(VENV)/bin/jupyter lab --ip=127.0.0.1 --port=$(PORT) --no-browser $(if $(filter 0,$(shell id -u)),--allow-root) \
	  --ServerApp.root_dir=. --MultiKernelManager.default_kernel_name=$(KERNEL)

bench: setup
	$(PY) -m benchmarks

fixtures: setup
	$(PY) -m fixtures.build
	$(PY) -m fixtures.build_cnn

# Rebuild every fixture into a temporary folder and compare it with the committed one (about 4 minutes: the CNN
# is trained again). Run it after changing fixtures/; CI runs it after `make test`.
check-fixtures: setup
	$(PY) -m pytest -m rebuild

kit: setup
	$(PY) -m instructor kit --out kit

clean:
	rm -rf build kit grades workspace
