"""Keep one process of the embedded stack (`make run`, the Procfile) running.

honcho, which runs the Procfile, stops every process as soon as one ends: a worker that died on
a database lock took Milvus and the web process down with it, and the last lines on the screen
were honcho's "sending SIGTERM", not why. This wrapper restarts its command when it ends
without being asked to, after a short backoff, and says so. A command that keeps dying (more
than RESTARTS times within WINDOW seconds) is not restarted again: the wrapper says plainly that
it gives up and why, and exits with the command's code, and honcho then stops the rest.

The command runs with a shell in the wrapper's own process group (the one honcho made for this
line), so honcho's SIGTERM to the group reaches the command directly and once; the wrapper then
ends when the command has ended (with 0: it was asked to). A signal sent to the wrapper alone is
passed on to the group if the command is still running FORWARD_AFTER seconds later.

    python scripts/keep_running.py NAME -- 'command && command'
"""

from __future__ import annotations

import argparse
import os
import shlex
import signal
import subprocess
import sys
import time
from collections import deque

RESTARTS = 5
WINDOW = 300.0  # seconds
FIRST_DELAY = 1.0
LONGEST_DELAY = 30.0
FORWARD_AFTER = 3.0  # seconds; honcho kills what is left after 5


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("name", help="what the command is, as the messages name it (web, worker, milvus)")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="the shell command, after --")
    parser.add_argument("--restarts", type=int, default=RESTARTS)
    parser.add_argument("--window", type=float, default=WINDOW)
    args = parser.parse_args(argv)
    parts = args.command[1:] if args.command[:1] == ["--"] else args.command
    # One argument is a shell command line as the Procfile wrote it; several are one command's words.
    command = parts[0] if len(parts) == 1 else shlex.join(parts)
    if not command:
        parser.error("a command is required after --")
    return Supervisor(args.name, command, restarts=args.restarts, window=args.window).run()


class Supervisor:
    def __init__(self, name: str, command: str, *, restarts: int, window: float) -> None:
        self.name = name
        self.command = command
        self.restarts = restarts
        self.window = window
        self.stopping = False
        self.child: subprocess.Popen | None = None
        self.exits: deque[float] = deque()
        self.signal = signal.SIGTERM
        self.signalled_at: float | None = None

    def run(self) -> int:
        signal.signal(signal.SIGTERM, self._stop)
        signal.signal(signal.SIGINT, self._stop)
        while True:
            self.child = subprocess.Popen(self.command, shell=True)  # noqa: S602 — the Procfile's own line
            code = self._wait()
            if self.stopping:
                return 0  # asked to stop, and stopped: whatever the command's code on the signal
            now = time.monotonic()
            self.exits.append(now)
            while self.exits and now - self.exits[0] > self.window:
                self.exits.popleft()
            if len(self.exits) > self.restarts:
                say(f"{self.name} 在 {self.window / 60:g} 分钟内退出了 {len(self.exits)} 次（最后的退出码 {code}），"
                    f"不再重启，整个服务随之停止。原因见上面 {self.name} 的日志。")
                return code or 1
            delay = min(FIRST_DELAY * 2 ** (len(self.exits) - 1), LONGEST_DELAY)
            say(f"{self.name} 意外退出（退出码 {code}），{delay:g} 秒后重启"
                f"（{self.window / 60:g} 分钟内第 {len(self.exits)} 次，超过 {self.restarts} 次则停止整个服务）。")
            if self._sleep(delay):
                return 0

    def _wait(self) -> int:
        """The command's exit code. Asked to stop, the command normally has the signal too
        (honcho and a terminal signal the whole group); one still running after FORWARD_AFTER
        seconds (this wrapper alone was signalled) gets the signal passed on, once. Passing it at
        once would give the worker a second SIGTERM, which aborts the document it is finishing."""
        assert self.child is not None
        forwarded = False
        while True:
            try:
                return self.child.wait(timeout=0.1)
            except subprocess.TimeoutExpired:
                pass
            if self.signalled_at is not None and not forwarded and time.monotonic() - self.signalled_at > FORWARD_AFTER:
                # To the whole group: the shell's own children (the command it runs) included.
                forwarded = True
                os.killpg(os.getpgid(self.child.pid), self.signal)

    def _sleep(self, seconds: float) -> bool:
        """Sleep unless asked to stop; True when asked."""
        deadline = time.monotonic() + seconds
        while not self.stopping and time.monotonic() < deadline:
            time.sleep(min(0.1, deadline - time.monotonic()))
        return self.stopping

    def _stop(self, signum: int, _frame) -> None:
        if self.stopping:
            return  # the signal passed on to the group reaches this process too
        self.stopping = True
        self.signal = signum
        self.signalled_at = time.monotonic()


def say(message: str) -> None:
    print(f"[ragsite] {message}", file=sys.stderr, flush=True)


if __name__ == "__main__":
    sys.exit(main())
