"""A server started on a port another server already listens on refuses to start, in one line.

gRPC binds with SO_REUSEPORT by default, under which the second server would start and take a share
of the first one's clients (a second scheduler over another database, a second inference server
with another checkpoint). Both servers turn it off (`evalfleet.ports`).
"""

from __future__ import annotations

import subprocess
import sys

import pytest
from procs import cli, policy_argv

from evalfleet.scheduler_api.client import SchedulerClient

pytestmark = pytest.mark.timeout(120)


def test_a_second_scheduler_on_a_taken_port_exits_2_in_one_line(scheduler, tmp_path):
    """Refused before the second database is even created."""
    taken = scheduler.address.rsplit(":", 1)[1]
    refused = cli("serve", "--db", str(tmp_path / "second.sqlite"), "--port", taken)
    assert refused.returncode == 2, refused
    assert refused.stderr.strip().splitlines() == [
        f"scheduler: cannot listen on 127.0.0.1:{taken}: the port is taken by another process"
    ], refused.stderr
    assert not (tmp_path / "second.sqlite").exists()
    with SchedulerClient(scheduler.address) as client:  # the first one still answers, alone
        assert client.workers() == []

    # The dashboard's port too: it was bound after the database opened, and a taken one was a traceback.
    refused = cli("serve", "--db", str(tmp_path / "third.sqlite"), "--port", "0", "--http-port", taken)
    assert refused.returncode == 2, refused
    assert refused.stderr.strip().splitlines() == [
        f"scheduler: --http-port: cannot listen on 127.0.0.1:{taken}: the port is taken by another process"
    ], refused.stderr
    assert not (tmp_path / "third.sqlite").exists()


def test_an_inference_server_on_a_taken_port_exits_2_in_one_line(start_policy, checkpoint_root):
    first = start_policy("syn")
    taken = first.address.rsplit(":", 1)[1]
    argv = policy_argv("other", checkpoint_root, port=int(taken))
    refused = subprocess.run([sys.executable, *argv[1:]], capture_output=True, text=True, timeout=90)
    assert refused.returncode == 2, refused
    # Its log lines (timestamped) come first; the refusal is its last line, and no traceback.
    assert "Traceback" not in refused.stderr, refused.stderr
    assert refused.stderr.strip().splitlines()[-1:] == [
        f"inference-server: cannot listen on 127.0.0.1:{taken}: the port is taken by another process"
    ], refused.stderr


def test_a_port_out_of_range_or_a_host_that_does_not_resolve_exits_2_in_one_line(tmp_path, checkpoint_root):
    """Name resolution wraps a port past 65535 (99999 would listen on 34463): refused instead."""
    db = tmp_path / "db.sqlite"
    refused = cli("serve", "--db", str(db), "--port", "99999")
    assert refused.returncode == 2, refused
    assert refused.stderr.strip().splitlines() == [
        "scheduler: cannot listen on 127.0.0.1:99999: the port is outside [0, 65535]"
    ], refused.stderr
    token = tmp_path / "token"
    token.write_text("s3cret\n")
    refused = cli("serve", "--db", str(db), "--host", "nosuchhost.invalid", "--port", "0", "--token-file", str(token))
    assert refused.returncode == 2 and "Traceback" not in refused.stderr, refused
    (line,) = refused.stderr.strip().splitlines()
    assert line.startswith("scheduler: cannot listen on nosuchhost.invalid:0: ") and "taken" not in line, line
    assert not db.exists()  # refused before the database is created
    # 192.0.2.1 (TEST-NET-1) resolves but is no address of this machine.
    refused = cli("serve", "--db", str(db), "--host", "192.0.2.1", "--port", "0", "--token-file", str(token))
    assert refused.returncode == 2 and "Traceback" not in refused.stderr, refused
    assert refused.stderr.strip().splitlines()[-1] == (
        "scheduler: cannot listen on 192.0.2.1:0: the host is not an address of this machine"
    ), refused.stderr

    argv = policy_argv("other", checkpoint_root, port=99999)
    refused = subprocess.run([sys.executable, *argv[1:]], capture_output=True, text=True, timeout=90)
    assert refused.returncode == 2 and "Traceback" not in refused.stderr, refused.stderr
    assert refused.stderr.strip().splitlines()[-1:] == [
        "inference-server: cannot listen on 127.0.0.1:99999: the port is outside [0, 65535]"
    ], refused.stderr
