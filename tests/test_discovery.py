"""Ids a newcomer can find, and a preview server that never ends in a traceback. Part of #21."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

from tests.test_corrections import CAMPAIGN, FIXTURE

RUN = "run-vm-20261203T062412Z-7432b5c24c0c"


def test_runs_lists_the_run_ids_rental_add_takes(cli):
    code, out, _ = cli("runs", CAMPAIGN, "--runs", FIXTURE, "--json")
    assert code == 0
    (run,) = json.loads(out)["runs"]
    assert (run["run_id"], run["planned"], run["recorded"], run["statuses"], run["complete"], run["rental"]) == (
        RUN, 20, 20, {"ok": 20}, True, None)
    code, text, _ = cli("runs", CAMPAIGN, "--runs", FIXTURE)
    assert text.startswith(f"{RUN}: started 2026-12-03T06:24:12") and "20 of 20 planned trials recorded (20 ok)" in text


def test_trials_lists_the_ids_deliver_and_exclude_take(cli):
    code, out, _ = cli("trials", CAMPAIGN, "--runs", FIXTURE, "--json")
    every = json.loads(out)["trials"]
    assert code == 0 and len(every) == 20 and {row["run_id"] for row in every} == {RUN}
    code, out, _ = cli("trials", CAMPAIGN, "--runs", FIXTURE, "--accepted", "--json")
    accepted = json.loads(out)["trials"]
    # The demo's int8 variant fails its agreement threshold: its 5 trials are not accepted.
    assert len(accepted) == 15 and all(row["corpus_accepted"] for row in accepted)
    assert all("int8" not in row["configuration"] for row in accepted)
    excluded = [row for row in every if row["excluded_by"]]
    assert len(excluded) == 1  # the fixture's exclusion
    code, text, _ = cli("trials", CAMPAIGN, "--runs", FIXTURE, "--run", "run-elsewhere")
    assert code == 0 and text.strip() == f"no trial of campaign {CAMPAIGN} matches"
    code, _, err = cli("trials", "demo-rotten-tomato", "--runs", FIXTURE)
    assert code == 1 and "did you mean demo-rotten-tomatoes?" in err


def _site(tmp_path: Path, cli) -> Path:
    assert cli("build", "--runs", FIXTURE, "--out", tmp_path / "site")[0] == 0
    return tmp_path / "site"


def test_serve_on_a_port_in_use_or_out_of_range_is_one_line(tmp_path, cli):
    site = _site(tmp_path, cli)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code, _, err = cli("serve", "--out", site, "--port", port)
    assert code == 1 and err.startswith(f"iteralab serve: error: cannot listen on 127.0.0.1:{port}: ") and "--port" in err
    assert "Traceback" not in err and len(err.splitlines()) == 1
    code, _, err = cli("serve", "--out", site, "--port", "80000")
    assert code == 2 and "80000 is not in the range 0<=x<=65535" in err


def test_serve_on_port_0_announces_the_port_it_listens_on(tmp_path, cli):
    site = _site(tmp_path, cli)
    process = subprocess.Popen([sys.executable, "-m", "iteralab", "serve", "--out", str(site), "--port", "0"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        line = process.stdout.readline()
        assert line.startswith(f"Serving {site} on http://127.0.0.1:") and ":0/" not in line
        url = line.split(" on ", 1)[1].split(" ", 1)[0]
        with urllib.request.urlopen(url + "index.html", timeout=30) as response:
            assert response.status == 200 and b"<html" in response.read()
    finally:
        process.terminate()
        process.communicate(timeout=30)


def test_a_failed_quality_criterion_reads_less_than_with_the_word_failed(tmp_path, cli):
    """Part of #21: "agreement 0.957 ≥ 0.98: 0/5" stated something true-looking; only the colour said it failed."""
    from bs4 import BeautifulSoup

    site = _site(tmp_path, cli)
    for page in ("decision.html", "index.html"):
        soup = BeautifulSoup((site / "campaigns" / CAMPAIGN / page).read_text(encoding="utf-8"), "html.parser")
        verdicts = {div.get_text(): div["class"] for div in soup.select(".verdict")}
        assert verdicts["agreement 0.957 < 0.98: failed in 5 of 5"] == ["verdict", "fail"]
        assert verdicts["accuracy 0.793 ≥ 0.73: passed in 5 of 5"] == ["verdict", "pass"]
        assert not any("≥" in text and "failed" in text for text in verdicts)
