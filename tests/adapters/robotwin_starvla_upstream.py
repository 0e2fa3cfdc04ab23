"""StarVLA's RoboTwin evaluation as StarVLA runs it, on RoboTwin's own code: script/eval_policy.py at
c3ddfa8, unedited (scripts/proofs/robotwin_eval_policy.py's upstream side, with its outside
patches), with StarVLA's deploy module as the policy: `get_model` is its `ModelClient`, restated
in tests/inference_server/starvla_reference.py, talking to the server at URL; `reset_model` is
`model.reset(task_description="")`; `eval` takes the instruction from `TASK_ENV.get_instruction()`
and the step from `TASK_ENV.take_action_cnt`, and passes the client's command to
`TASK_ENV.take_action` (model2robotwin_interface.py's `get_model`, `reset_model`, `eval`). Run by
.venv-robotwin's python, which has StarVLA's client libraries (requirements/robotwin.txt).

Usage: python robotwin_starvla_upstream.py ROOT TASK SETTING URL UNNORM_KEY ACTION_MODE MAX_ACTIONS OUT
Writes OUT: the first episode's record (seed, instruction, first observation's digest, the trace
digest after every action, success and steps), as the proof script's records are.
"""

import json
import os
import shutil
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(REPO), str(REPO / "tests" / "inference_server")]

from starvla_reference import RobotwinModelClient, robotwin_eval  # noqa: E402

from scripts.proofs.robotwin_eval_policy import (  # noqa: E402
    EpisodeRecord,
    RecordingPolicy,
    run_upstream,
    upstream_environment,
)


class StarvlaDeploy(RecordingPolicy):
    """StarVLA's deploy module for RoboTwin, with its model client, recording what upstream ran."""

    def __init__(self, client: RobotwinModelClient, max_actions: int, out: Path) -> None:
        super().__init__(1, max_actions, out)
        self.client = client

    def reset(self, model: Any) -> None:
        super().reset(model)
        self.client.reset(task_description="")

    def action(self, env: Any, observation: dict[str, Any], record: EpisodeRecord) -> Any:
        return robotwin_eval(self.client, observation, env.get_instruction(), env.take_action_cnt)


def main() -> None:
    root, task, setting, url, unnorm_key, action_mode, max_actions, out = sys.argv[1:]
    environment, work = upstream_environment()
    os.environ.update(environment)  # the ffmpeg stand-in, for the videos eval_policy.py writes
    recorded = Path(work) / "episode.json"
    client = RobotwinModelClient(url, unnorm_key=unnorm_key, action_mode=action_mode)
    try:
        run_upstream(Path(root), task, setting, StarvlaDeploy(client, int(max_actions), recorded))
    except SystemExit as ended:
        if ended.code not in (0, None):
            raise
    finally:
        client.client.close()
    (record,) = (EpisodeRecord(**r) for r in json.loads(recorded.read_text(encoding="utf-8")))
    Path(out).write_text(json.dumps(asdict(record)), encoding="utf-8")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
