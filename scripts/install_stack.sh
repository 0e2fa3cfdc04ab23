#!/usr/bin/env bash
# Builds one simulator stack as an overlay of the environment PYTHON runs: DIR holds the pins of
# the PINS file that PYTHON does not already have, installed without their dependencies (the
# environment's other packages, or the PINS file itself, resolve them), and a copy of the pins
# (stack.txt). Put first on the Python path (`renderer-worker --stack NAME` does for
# .stacks/NAME), it shadows those distributions for imports and importlib.metadata alike. Then it
# checks that every pin is what imports, imports the simulator packages it pins (robosuite and
# Meta-World check their MuJoCo at import) and renders 8x8 offscreen, so a broken stack fails here
# rather than in a worker or a test.
# Usage: scripts/install_stack.sh PYTHON PINS DIR   (run from the repository root)
#   e.g. scripts/install_stack.sh .venv/bin/python requirements/stacks/NAME.txt .stacks/NAME
set -euo pipefail
PY="$1"
PINS="$2"
DIR="$3"
[ -f "$PINS" ] || { echo "install_stack.sh: no $PINS" >&2; exit 2; }

rm -rf "$DIR"
mkdir -p "$DIR"
# The pins this environment lacks (a distribution at another version, or absent).
MISSING=$("$PY" - "$PINS" <<'PYTHON'
import importlib.metadata, sys
for line in open(sys.argv[1]):
    line = line.split("#", 1)[0].strip()
    if not line:
        continue
    name, _, version = line.partition("==")
    try:
        have = importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        have = None
    if have != version:
        print(line)
PYTHON
)
if [ -n "$MISSING" ]; then
    # shellcheck disable=SC2086  # one argument per pin
    "$PY" -m pip install -q --no-deps --no-compile --target "$DIR" $MISSING
fi
cp "$PINS" "$DIR/stack.txt"
# An overlay's own robosuite asks for its own private macros file.
if [ -d "$DIR/robosuite" ]; then
    PYTHONPATH="$DIR${PYTHONPATH:+:$PYTHONPATH}" scripts/setup_robosuite_macros.sh "$PY"
fi

PYTHONPATH="$DIR${PYTHONPATH:+:$PYTHONPATH}" MUJOCO_GL=osmesa "$PY" - "$DIR/stack.txt" <<'PYTHON'
import importlib.metadata, sys
for line in open(sys.argv[1]):
    line = line.split("#", 1)[0].strip()
    if line:
        name, _, version = line.partition("==")
        have = importlib.metadata.version(name)
        assert have == version, f"{name} is {have} on the stack, it pins {version}"
import importlib
import mujoco

pinned = set()
for line in open(sys.argv[1]):
    line = line.split("#", 1)[0].strip()
    if line:
        pinned.add(line.partition("==")[0].lower())
for simulator in ("robosuite", "metaworld"):
    if simulator in pinned:
        importlib.import_module(simulator)

assert mujoco.__version__ == importlib.metadata.version("mujoco"), mujoco.__version__
model = mujoco.MjModel.from_xml_string('<mujoco><worldbody><geom size="0.1"/></worldbody></mujoco>')
data = mujoco.MjData(model)
mujoco.mj_forward(model, data)
renderer = mujoco.Renderer(model, 8, 8)
renderer.update_scene(data)
assert renderer.render().shape == (8, 8, 3)
PYTHON
touch "$DIR/.evalfleet-installed"
