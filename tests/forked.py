"""Start `python -m iteralab ARGS` as a fork of one warmed interpreter, for the tests that kill or signal runs (#48).

A fresh interpreter imports torch and transformers before it can run a campaign: about 3 s of CPU a start on two cores,
and the kill tests start seven runs or more. The warm interpreter ("the zygote", one per test process) imports them
once, runs nothing, then forks a child per start. Each child is a process of its own that runs the CLI's main() with
the given arguments, working folder and environment, its stdin on /dev/null and its stdout and stderr in files, and
exits with main()'s status; a signal the test sends reaches it alone, and a SIGKILL ends it as it would end any process.
The zygote never runs torch, so no thread pool or lock of torch's is held when it forks.

    python -m tests.forked   # the zygote's own loop: one JSON job a line on stdin, the child's pid and exit on stdout
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# Imported before the first fork: what `iteralab run` on the tiny BERT imports beyond the CLI.
WARM = ("torch", "transformers", "transformers.models.bert.modeling_bert", "transformers.models.bert.tokenization_bert",
        "jsonschema", "jsonschema_rs", "iteralab.cli", "iteralab.cli.run", "iteralab.run.runner", "iteralab.store.reading")


class Zygote:
    """The warmed interpreter: start() forks it into a Forked child; one child at a time."""

    def __init__(self):
        self.process = subprocess.Popen([sys.executable, "-m", "tests.forked"], cwd=ROOT, stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, bufsize=0)
        self.said = b""  # what the zygote wrote and no line was read from yet
        ready = self.line(timeout=300)
        if ready != {"ready": True}:
            raise RuntimeError(f"the warm interpreter did not start: {ready!r}")
        self.running: Forked | None = None

    def line(self, timeout: float | None) -> dict | None:
        """Return the zygote's next line, or None when none came within TIMEOUT seconds (None: wait for it)."""
        fd = self.process.stdout.fileno()
        while b"\n" not in self.said:
            if not select.select([fd], [], [], timeout)[0]:
                return None
            chunk = os.read(fd, 4096)
            if not chunk:
                raise RuntimeError(f"the warm interpreter ended (status {self.process.wait()})")
            self.said += chunk
        line, self.said = self.said.split(b"\n", 1)
        return json.loads(line)

    def start(self, args, *, cwd=None, env=None) -> Forked:
        """Fork a child running `iteralab ARGS` in CWD with ENV (this process's environment when None)."""
        if self.running is not None and self.running.poll() is None:
            raise RuntimeError("the warm interpreter runs one child at a time: wait for the last one first")
        folder = tempfile.mkdtemp(prefix="iteralab-forked-")
        job = {"args": [str(arg) for arg in args], "cwd": str(cwd or os.getcwd()),
               "env": dict(os.environ if env is None else env),
               "stdout": os.path.join(folder, "stdout"), "stderr": os.path.join(folder, "stderr")}
        self.process.stdin.write(json.dumps(job).encode() + b"\n")
        self.running = Forked(self, self.line(timeout=60)["pid"], folder)
        return self.running

    def close(self):
        if self.running is not None and self.running.poll() is None:
            self.running.kill()
            self.running.wait(60)
        self.process.stdin.close()
        self.process.wait(timeout=60)
        # Unbuffered, its stdout is a raw FileIO: left open, its ResourceWarning surfaced when it was collected, in
        # whatever test ran then, as a PytestUnraisableExceptionWarning failure.
        self.process.stdout.close()


class Forked:
    """A child of the zygote, read as subprocess.Popen's: poll, wait, send_signal, kill, communicate, returncode."""

    def __init__(self, zygote: Zygote, pid: int, folder: str):
        self.zygote, self.pid, self.folder = zygote, pid, folder
        self.pidfd = os.pidfd_open(pid)  # signals go to this process even if its pid were reused after it ends
        self.returncode: int | None = None

    def _read_exit(self, timeout: float | None) -> int | None:
        if self.returncode is None and (said := self.zygote.line(timeout)) is not None:
            self.returncode = said["exit"]
            os.close(self.pidfd)
        return self.returncode

    def poll(self) -> int | None:
        return self._read_exit(0)

    def wait(self, timeout: float | None = None) -> int:
        if self._read_exit(timeout) is None:
            raise subprocess.TimeoutExpired(["iteralab (forked)"], timeout)
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            signal.pidfd_send_signal(self.pidfd, sig)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def communicate(self, timeout: float | None = None) -> tuple[str, str]:
        """Wait for the child; return what it wrote on stdout and stderr."""
        self.wait(timeout)
        said = tuple(Path(self.folder, name).read_text(encoding="utf-8", errors="replace") for name in ("stdout", "stderr"))
        for name in ("stdout", "stderr"):
            Path(self.folder, name).unlink()
        os.rmdir(self.folder)
        return said


def _child(job: dict) -> None:
    """In the forked child: become `iteralab ARGS` and exit with its status; never return."""
    code = 1
    try:
        os.chdir(job["cwd"])
        os.environ.clear()
        os.environ.update(job["env"])
        for fd, path, flags in ((0, os.devnull, os.O_RDONLY), (1, job["stdout"], os.O_WRONLY | os.O_CREAT),
                                (2, job["stderr"], os.O_WRONLY | os.O_CREAT)):
            opened = os.open(path, flags, 0o600)
            os.dup2(opened, fd)
            os.close(opened)
        sys.argv = ["iteralab", *job["args"]]
        from iteralab.cli import main

        code = main(job["args"])
    except SystemExit as done:
        code = done.code if isinstance(done.code, int) else (0 if done.code is None else 1)
    except BaseException:  # as an uncaught exception ends an interpreter: its traceback on stderr, status 1
        import traceback

        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):  # a closed or broken stream: nothing more to write
                stream.flush()
        os._exit(code)


def _serve() -> None:
    import importlib

    for name in WARM:
        importlib.import_module(name)
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        job = json.loads(line)
        pid = os.fork()
        if pid == 0:
            _child(job)
        print(json.dumps({"pid": pid}), flush=True)
        _, status = os.waitpid(pid, 0)
        print(json.dumps({"exit": os.waitstatus_to_exitcode(status)}), flush=True)


if __name__ == "__main__":
    _serve()
