"""REFERENCE: the harnesses' own axis-angle functions and vla-eval's LIBERO state, called as they are
installed (robosuite 1.4.0, vla-eval 0.8.0), for `test_remote_state_transforms.py`.

Run in a process of its own, because importing robosuite chooses MuJoCo's GL backend for the whole
process and vla-eval's LIBERO module sets PYOPENGL_PLATFORM: a test process that later renders
LIBERO must not inherit either. Reads quaternions (and positions and gripper values) from one .npz,
writes what each function returns to another (numeric arrays only, no pickles).

    python axisangle_reference.py IN.npz OUT.npz
"""

from __future__ import annotations

import sys

import numpy as np
from robosuite.utils.transform_utils import quat2axisangle
from vla_eval.benchmarks.libero.benchmark import LIBEROBenchmark, _quat_to_axisangle_robosuite
from vla_eval.rotation import quat_to_axisangle


def main(source: str, target: str) -> None:
    inputs = np.load(source, allow_pickle=False)
    quats, positions, grippers = inputs["quat"], inputs["pos"], inputs["gripper"]
    out = {
        # robosuite clips w in place: each call gets its own copy, as a fresh observation would be.
        "robosuite": np.stack([quat2axisangle(q.copy()) for q in quats]),
        "vlaeval": np.stack([quat_to_axisangle(q.copy()) for q in quats]),
        "vlaeval_no_antipodal": np.stack([_quat_to_axisangle_robosuite(q.copy()) for q in quats]),
    }
    for no_antipodal in (False, True):
        benchmark = LIBEROBenchmark(send_state=True, quat_no_antipodal=no_antipodal)
        out[f"libero_states_{'no_antipodal' if no_antipodal else 'antipodal'}"] = np.stack(
            [
                benchmark._proprio_state(
                    {"robot0_eef_pos": p.copy(), "robot0_eef_quat": q.copy(), "robot0_gripper_qpos": g.copy()}
                )
                for q, p, g in zip(quats, positions, grippers, strict=True)
            ]
        )
    np.savez(target, **out)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
