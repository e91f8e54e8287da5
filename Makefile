# Calibration Lab. `make lab` runs the workbook and grades it; `make test` runs every test.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
KERNEL := calibration-lab
PORT   ?= 8888

.PHONY: setup lab test jupyter bench fixtures kit clean

setup: $(STAMP)

$(STAMP): requirements.txt pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements.txt
	$(PY) -m pip install --quiet -e '.[dask]'  # the grader's optional Dask extra, for its tests
	$(PY) -m ipykernel install --sys-prefix --name $(KERNEL) --display-name "Calibration Lab" >/dev/null
	touch $(STAMP)

lab: setup
	$(PY) -m instructor workbook

test: setup
	$(PY) -m pytest

jupyter: setup
	$(VENV)/bin/jupyter lab --ip=127.0.0.1 --port=$(PORT) --no-browser $(if $(filter 0,$(shell id -u)),--allow-root) \
	  --ServerApp.root_dir=. --MultiKernelManager.default_kernel_name=$(KERNEL)

bench: setup
	$(PY) -m benchmarks

fixtures: setup
	$(PY) -m fixtures.build

kit: setup
	$(PY) -m instructor kit --out kit

clean:
	rm -rf build kit grades workspace
