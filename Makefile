# Two commands set everything up on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
EXTRAS := test,lint,inference,libero,robotwin,plots,remote,worker,wandb
INSTALL_STAMP := $(VENV)/.evalfleet-installed
# The lerobot backend's own virtualenv (requirements/lerobot.txt says why it cannot share .venv).
PYTHON311 ?= python3.11
LEROBOT_VENV ?= .venv-lerobot
LEROBOT_PY := $(LEROBOT_VENV)/bin/python
LEROBOT_STAMP := $(LEROBOT_VENV)/.evalfleet-installed
PROTO_SRC := $(wildcard protos/evalfleet/v1/*.proto)
# Simulator stacks beside the `libero` extra's (requirements/stacks/NAME.txt): each an overlay of
# .venv in .stacks/NAME holding only the pins that differ (scripts/install_stack.sh), which
# `renderer-worker --stack NAME` runs on.
STACK_NAMES := $(basename $(notdir $(wildcard requirements/stacks/*.txt)))
STACK_STAMPS := $(foreach name,$(STACK_NAMES),.stacks/$(name)/.evalfleet-installed)

.PHONY: demo test test-fast lint protos docs bench clean iproute2 lerobot-venv lerobot-libero lerobot-metaworld stacks robotwin installed

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip

# One resolver run for every extra (LIBERO pins numpy, torch comes from its CPU wheel), then the
# system library MuJoCo renders with on CPU and a smoke render.
$(INSTALL_STAMP): pyproject.toml scripts/install_libero.sh | $(PY)
	$(PY) -m pip install -q -e '.[$(EXTRAS)]'
	scripts/install_libero.sh $(PY)
	touch $@

# Python 3.11 (lerobot 0.4.4 is the newest for it); torch 2.14.1 + torchvision 0.29.1 come from the
# machine's local wheels. One resolver run for lerobot's requirements and evalfleet (editable, so
# the server runs this tree's code), then lerobot itself without its torch caps, then a smoke import.
$(LEROBOT_PY):
	$(PYTHON311) -m venv $(LEROBOT_VENV)
	$(LEROBOT_PY) -m pip install -q --upgrade pip

$(LEROBOT_STAMP): requirements/lerobot.txt requirements/lerobot-no-deps.txt pyproject.toml | $(LEROBOT_PY)
	$(LEROBOT_PY) -m pip install -q -r requirements/lerobot.txt -e .
	$(LEROBOT_PY) -m pip install -q --no-deps -r requirements/lerobot-no-deps.txt
	$(LEROBOT_PY) -c "import inference_server.backends.lerobot, lerobot.policies.act.modeling_act"
	touch $@

lerobot-venv: $(LEROBOT_STAMP)

# RoboTwin 2.0's CPU stack (requirements/robotwin.txt says why it has its own virtualenv): SAPIEN 3
# on Mesa's lavapipe (installed as root from bookworm-backports), mplib with RoboTwin's own fix,
# and evalfleet (editable), so that a renderer worker runs RoboTwin's code from it.
ROBOTWIN_VENV ?= .venv-robotwin
ROBOTWIN_PY := $(ROBOTWIN_VENV)/bin/python
ROBOTWIN_STAMP := $(ROBOTWIN_VENV)/.evalfleet-installed
$(ROBOTWIN_STAMP): requirements/robotwin.txt pyproject.toml scripts/install_robotwin.sh
	scripts/install_robotwin.sh $(PYTHON311) $(ROBOTWIN_VENV)

robotwin: $(ROBOTWIN_STAMP)

.stacks/%/.evalfleet-installed: requirements/stacks/%.txt scripts/install_stack.sh $(INSTALL_STAMP)
	scripts/install_stack.sh $(PY) requirements/stacks/$*.txt .stacks/$*

stacks: $(STACK_STAMPS)

# LIBERO for the lerobot virtualenv, so that lerobot-eval itself runs LIBERO episodes on the `lerobot`
# preset's simulator stack (requirements/lerobot-libero.txt says why): an overlay put on the path only
# there, by scripts/proofs/lerobot_eval_recorded.py; the closed-loop test runs it.
LEROBOT_LIBERO ?= .venv-lerobot-libero
LEROBOT_LIBERO_STAMP := $(LEROBOT_LIBERO)/.evalfleet-installed
$(LEROBOT_LIBERO_STAMP): requirements/lerobot-libero.txt scripts/install_stack.sh $(LEROBOT_STAMP)
	scripts/install_stack.sh $(LEROBOT_PY) requirements/lerobot-libero.txt $(LEROBOT_LIBERO)

lerobot-libero: $(LEROBOT_LIBERO_STAMP)

# Meta-World for the lerobot virtualenv, so that lerobot-eval itself runs Meta-World episodes on the
# stack evalfleet's Meta-World workers run (requirements/lerobot-metaworld.txt says why): an overlay
# put on the path only by scripts/proofs/lerobot_eval_metaworld.py and the proofs' tests.
LEROBOT_METAWORLD ?= .venv-lerobot-metaworld
LEROBOT_METAWORLD_STAMP := $(LEROBOT_METAWORLD)/.evalfleet-installed
$(LEROBOT_METAWORLD_STAMP): requirements/lerobot-metaworld.txt scripts/install_stack.sh $(LEROBOT_STAMP)
	scripts/install_stack.sh $(LEROBOT_PY) requirements/lerobot-metaworld.txt $(LEROBOT_METAWORLD)

lerobot-metaworld: $(LEROBOT_METAWORLD_STAMP)

# The dashboard's browser test drives Debian's chromium (Playwright never downloads a browser here).
/usr/bin/chromium:
	apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null

# tests/test_slurm.py runs scripts/slurm/ on a real one-node SLURM it starts: Debian's slurm-wlm and munge.
/usr/sbin/slurmctld:
	apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq slurm-wlm munge >/dev/null

# A real libero_object evaluation with the scripted oracle on a local fleet (runs/demo/RESULTS.json):
# one spec, run by `scheduler run`; --fresh, so that every `make demo` evaluates again.
demo: $(INSTALL_STAMP)
	$(PY) -m scheduler.cli run examples/specs/demo.yaml --fresh

# The multi-host tests make network namespaces with iproute2's `ip`; without root they skip.
iproute2:
	@command -v ip >/dev/null || [ "$$(id -u)" != 0 ] || \
		(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq iproute2 >/dev/null)

# Everything the tests use. The virtualenvs build side by side (each writes only its own folder, and
# in that batch only RoboTwin's stack runs apt-get), then the system packages, one apt-get at a time.
installed:
	$(MAKE) -j4 $(INSTALL_STAMP) $(STACK_STAMPS) $(LEROBOT_LIBERO_STAMP) $(LEROBOT_METAWORLD_STAMP) $(ROBOTWIN_STAMP)
	$(MAKE) /usr/bin/chromium /usr/sbin/slurmctld iproute2

# LIBERO, the lerobot virtualenv (and its LIBERO overlay), the simulator stacks and RoboTwin's CPU
# stack are installed above, so their tests must run, not skip.
# TEST_JOBS pytest processes (xdist), each taking whole test files; 1 runs the suite in one. Three
# on two cores: with two, the cores idled a tenth of a clean run while tests waited on the
# processes and sockets they start.
TEST_JOBS ?= 3
test: installed
	EVALFLEET_REQUIRE_LIBERO=1 EVALFLEET_REQUIRE_STACKS=1 EVALFLEET_REQUIRE_SLURM=1 EVALFLEET_REQUIRE_ROBOTWIN=1 EVALFLEET_ROBOTWIN_PYTHON=$(ROBOTWIN_PY) EVALFLEET_LEROBOT_PYTHON=$(LEROBOT_PY) EVALFLEET_LEROBOT_LIBERO=$(LEROBOT_LIBERO) EVALFLEET_LEROBOT_METAWORLD=$(LEROBOT_METAWORLD) $(PY) -m pytest -n $(TEST_JOBS) --dist loadfile --durations=30

# The core in a few minutes: everything but the tests that need LIBERO, chromium, network namespaces or SLURM
# (pytest markers in pyproject.toml). CI runs `make test`; this is for iterating.
test-fast: $(INSTALL_STAMP)
	$(PY) -m pytest -m "not libero and not browser and not netns and not slurm and not proof"

# Lint, format, types and the layering contracts (pyproject.toml); CI runs this before the tests.
lint: $(INSTALL_STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports

# Regenerates the committed Python code (evalfleet/v1/) from the .proto files (tests fail when it is stale).
protos: $(INSTALL_STAMP)
	$(PY) -m grpc_tools.protoc -I protos --python_out=. --pyi_out=. --grpc_python_out=. $(PROTO_SRC)

# Regenerates docs/design.md's layout table from the modules' docstrings (tests fail when it is stale).
docs: $(INSTALL_STAMP)
	$(PY) -m scripts.docs_layout

bench: $(INSTALL_STAMP)
	$(PY) -m scripts.bench.scheduler
	$(PY) -m scripts.bench.inference

clean:
	rm -rf $(VENV) $(LEROBOT_VENV) $(LEROBOT_LIBERO) $(LEROBOT_METAWORLD) $(ROBOTWIN_VENV) .stacks .pytest_cache build *.egg-info
