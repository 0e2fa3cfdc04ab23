"""The settings files docs/remote.md ships, read from the document itself, so that the tests
serve the recipes users copy, not copies of them."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

DOCS = Path(__file__).resolve().parents[2] / "docs" / "remote.md"


def recipe(name: str) -> dict[str, Any]:
    """The settings file docs/remote.md writes with `cat > NAME <<'EOF'`."""
    match = re.search(rf"cat > {re.escape(name)} <<'EOF'\n(.*?)\nEOF\n", DOCS.read_text(), re.DOTALL)
    assert match, f"docs/remote.md has no {name}"
    settings: dict[str, Any] = yaml.safe_load(match.group(1))
    return settings


def robotwin_reply(action_mode: str) -> dict[str, Any]:
    """The settings docs/remote.md gives for a StarVLA RoboTwin checkpoint of that action_mode
    beside starvla_robotwin.yaml's: its `reply` steps, and any other setting the block declares
    (`rel`'s `action_dtype`)."""
    if action_mode == "abs":
        return {"reply": recipe("starvla_robotwin.yaml")["reply"]}
    header = f"# starvla_robotwin.yaml's reply for action_mode: {action_mode} "
    match = re.search(rf"```yaml\n({re.escape(header)}.*?)```", DOCS.read_text(), re.DOTALL)
    assert match, f"docs/remote.md has no reply for action_mode {action_mode}"
    block: dict[str, Any] = yaml.safe_load(match.group(1))
    return block
