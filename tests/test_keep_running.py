"""`scripts/keep_running.py`, the wrapper of each process `make run` starts: a process that ends
unexpectedly is restarted and says so; one that keeps ending stops the run with the reason; a
signal stops it without a restart."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "keep_running.py"


def keep_running(name: str, command: str, *args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, str(SCRIPT), *args, name, "--", command], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)


def test_a_command_that_ends_unexpectedly_is_restarted_and_says_why(tmp_path):
    # given: a command that fails the first time it runs and then stays up
    first, second = tmp_path / "first", tmp_path / "second"
    command = f"if [ -e {first} ]; then touch {second}; echo second; sleep 30; else touch {first}; echo first; exit 3; fi"
    process = keep_running("worker", command)
    try:
        # when: it has failed once and been started again
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not second.exists():
            time.sleep(0.1)
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        out, err = process.communicate(timeout=20)
    # then: restarted after saying which process ended with which code
    assert out.splitlines()[:2] == ["first", "second"], (out, err)
    assert "worker 意外退出（退出码 3）" in err and "后重启" in err


def test_a_command_that_keeps_ending_stops_the_run_with_the_reason():
    # given: a command that always fails, allowed 2 restarts
    process = keep_running("worker", "exit 7", "--restarts", "2")
    # when
    out, err = process.communicate(timeout=60)
    # then: the wrapper ends with the command's code and says it gave up, and why
    assert process.returncode == 7
    assert err.count("意外退出") == 2
    assert "不再重启，整个服务随之停止" in err and "最后的退出码 7" in err


def test_a_signal_to_the_group_stops_the_command_and_the_wrapper_without_a_restart():
    # given
    process = keep_running("web", "sleep 60")
    time.sleep(1)
    # when: as honcho stops the run (SIGTERM to the process group)
    os.killpg(process.pid, signal.SIGTERM)
    out, err = process.communicate(timeout=20)
    # then: a clean stop
    assert process.returncode == 0
    assert "重启" not in err


def test_a_signal_to_the_wrapper_alone_reaches_the_command():
    # given
    process = keep_running("web", "sleep 60")
    time.sleep(1)
    # when: only the wrapper is signalled (a `kill PID`)
    started = time.monotonic()
    process.send_signal(signal.SIGTERM)
    out, err = process.communicate(timeout=20)
    # then: passed on after the grace period, and not restarted
    assert time.monotonic() - started < 15
    assert process.returncode == 0
    assert "重启" not in err
