"""Disturbed trials in the records (#49): old records read, the decision sets disturbed trials aside unless the
protocol lets it use them, an unstable spread is said in words on the campaign page and in decide, and the protocol
of a campaign file without [protocol.disturbance] is what it was."""

from __future__ import annotations

import csv
import io
import json

import pytest

from iteralab.core.errors import UserError
from iteralab.decision.report import decision_report
from iteralab.machine.disturbance import DEFAULTS
from iteralab.run.campaign import load_campaign
from iteralab.site.build import build_site
from iteralab.store import reading, records
from iteralab.store.disturbance import measured, unstable_statements
from iteralab.store.trials import trial_table
from iteralab.store.views import campaign_views
from tests import factory

CPU = factory.machine(None, cpu="Test CPU", threads=2)


def interference(disturbed: bool) -> dict:
    crossed = [{"what": "other_cpu_share", "value": 0.8, "waited_share": 0.79, "threshold": 0.1, "other_processes": [],
                "text": "other processes used 0.80 of a core on this process's cores, and its threads waited 0.79 of the "
                        "window for a CPU (threshold 0.10)"}] if disturbed else []
    return {"disturbed": disturbed, "crossed": crossed, "rule": dict(DEFAULTS), "rule_source": "iteralab's defaults",
            "host": {"other_cpu_share": 0.8 if disturbed else 0.01, "waited_share": 0.79 if disturbed else 0.0, "reasons": {}},
            "gpu": {"source": None, "reason": "no GPU: the variant runs on the CPU", "throttle_reasons": None,
                    "other_processes": None}, "threads": {"torch_intra_op": 2}}


def write(folder, durations: dict, *, disturbed=(), old=False, protocol_extra=None):
    """A run of variants b1/b8 with the given windows; trials (variant, repetition) in DISTURBED marked; OLD: no
    interference object at all (records written before #49)."""
    manifest = factory.manifest("camp", "run-1", environment=CPU)
    manifest["protocol"].update(protocol_extra or {})
    records.append(folder, manifest)
    sequence, written = 0, {}
    for variant, seconds in durations.items():
        for repetition, value in enumerate(seconds, start=1):
            sequence += 1
            trial = factory.trial(manifest, variant, seconds=value, repetition=repetition, sequence=sequence,
                                  batch_size=int(variant[1:]))
            if not old:
                trial["interference"] = interference((variant, repetition) in disturbed)
            records.append(folder, trial)
            written[(variant, repetition)] = trial
    return written


def test_a_record_without_interference_still_reads_and_counts_as_not_measured(tmp_path):
    trials = write(tmp_path, {"b1": [1.0, 1.02, 1.01], "b8": [0.5, 0.51, 0.5]}, old=True)
    loaded = reading.load(tmp_path)
    assert not loaded.problems
    view = campaign_views(loaded)[0]
    assert [summary.ok for summary in view.variants] == [3, 3]  # nothing set aside
    assert not any(measured(t) for t in view.trials) and "interference" not in trials[("b1", 1)]
    assert unstable_statements(view) == []
    table = trial_table(view)  # the raw table: not measured is an empty cell, never False
    assert list(table["disturbed"]) == [None] * 6 and list(table["disturbance"]) == [None] * 6


def test_a_disturbed_trial_is_set_aside_unless_the_protocol_uses_it_and_the_spread_is_said(tmp_path):
    durations = {"b1": [1.0, 1.02, 4.6, 1.01], "b8": [0.5, 0.51, 0.5, 0.52]}
    trials = write(tmp_path / "busy", durations, disturbed={("b1", 3)})
    assert not reading.load(tmp_path / "busy").problems  # the interference object is valid against the schema
    view = campaign_views(reading.load(tmp_path / "busy"))[0]
    b1 = view.variants[0]
    assert b1.ok == 3 and b1.maximum == 1.02 and trials[("b1", 3)]["record_id"] in b1.disturbed and not b1.excluded
    said = unstable_statements(view)
    assert len(said) == 1 and said[0].startswith("b1") and ": the result may be unstable. Its slowest repetition is 4.5 times" in said[0]
    assert f"Trials measured as disturbed: {trials[('b1', 3)]['record_id']}; the decision sets them aside" in said[0]
    # The protocol may let the decision use it: then it counts.
    write(tmp_path / "allowed", durations, disturbed={("b1", 3)}, protocol_extra={"disturbance": {**DEFAULTS, "use_disturbed": True}})
    allowed = campaign_views(reading.load(tmp_path / "allowed"))[0]
    assert allowed.variants[0].ok == 4 and allowed.variants[0].maximum == 4.6
    assert "the protocol lets the decision use them" in unstable_statements(allowed)[0]


def test_an_unstable_spread_with_no_disturbed_trial_says_none_was_measured_as_disturbed(tmp_path):
    write(tmp_path, {"b1": [1.0, 1.02, 4.6], "b8": [0.5, 0.51, 0.5]})
    said = unstable_statements(campaign_views(reading.load(tmp_path))[0])
    assert len(said) == 1 and "None of its trials was measured as disturbed" in said[0]


def test_decide_and_the_campaign_page_say_it_and_a_quiet_run_says_nothing(tmp_path, cli):
    write(tmp_path / "busy", {"b1": [1.0, 1.02, 4.6, 1.01], "b8": [0.5, 0.51, 0.5, 0.52]}, disturbed={("b1", 3)})
    write(tmp_path / "quiet", {"b1": [1.0, 1.02, 1.03, 1.01], "b8": [0.5, 0.51, 0.5, 0.52]})
    code, out, _ = cli("decide", "camp", "--runs", tmp_path / "busy")
    assert code == 0 and "Unstable spread:" in out and ": the result may be unstable." in out
    code, out, _ = cli("decide", "camp", "--runs", tmp_path / "busy", "--json")
    assert "the result may be unstable" in json.loads(out)["unstable"][0]
    report = decision_report(campaign="camp", runs=tmp_path / "busy")
    assert len(report.unstable) == 1  # the Python API
    b1 = next(row for row in report.rows if row.summary.name == "b1")  # the disturbed 4.6 s is in no figure
    assert b1.window_seconds == (1.0, 1.01, 1.02) and b1.statuses == {"ok": 3}
    code, out, _ = cli("decide", "camp", "--runs", tmp_path / "quiet")
    assert code == 0 and "Unstable spread" not in out
    assert "unstable" not in json.loads(cli("decide", "camp", "--runs", tmp_path / "quiet", "--json")[1])
    for name, expected in (("busy", True), ("quiet", False)):
        build_site(runs=tmp_path / name, out=tmp_path / f"site-{name}", quiet=True)
        page = (tmp_path / f"site-{name}" / "campaigns" / "camp" / "index.html").read_text(encoding="utf-8")
        assert ('class="unstable"' in page) is expected and ("the result may be unstable" in page) is expected
    # The raw table keeps the disturbed row, marked, with what crossed the rule.
    rows = list(csv.DictReader(io.StringIO((tmp_path / "site-busy" / "campaigns" / "camp" / "trials.csv").read_text())))
    assert len(rows) == 8 and [row["disturbed"] for row in rows].count("True") == 1
    assert next(row for row in rows if row["disturbed"] == "True")["disturbance"].startswith("other processes used 0.80")


def test_the_protocol_has_the_table_only_when_the_campaign_file_declares_it(tiny_campaign):
    plain = load_campaign(tiny_campaign(disturbance=None))
    assert "disturbance" not in plain.protocol
    declared = tiny_campaign(name="declared", disturbance="use_disturbed = true")
    assert load_campaign(declared).protocol["disturbance"] == {**DEFAULTS, "use_disturbed": True}
    wrong = tiny_campaign(name="wrong", disturbance="other_cpu_shar = 0.2")
    with pytest.raises(UserError, match=r"\[protocol.disturbance\] unknown key\(s\) other_cpu_shar"):
        load_campaign(wrong)


def test_the_trial_page_says_what_disturbed_a_trial_and_whether_it_counts(tmp_path):
    """A disturbed trial's section said nothing of it: a reader saw an ok trial that the decision left out."""
    from bs4 import BeautifulSoup

    durations = {"b1": [1.0, 1.02, 4.6, 1.01], "b8": [0.5, 0.51, 0.5, 0.52]}
    for name, extra in (("busy", None), ("allowed", {"disturbance": {**DEFAULTS, "use_disturbed": True}})):
        trials = write(tmp_path / name, durations, disturbed={("b1", 3)}, protocol_extra=extra)
        build_site(runs=tmp_path / name, out=tmp_path / f"site-{name}", quiet=True, languages=("en", "id"))
        for language, folder in (("en", ""), ("id", "id")):
            page = BeautifulSoup((tmp_path / f"site-{name}" / folder / "campaigns" / "camp" / "trials.html")
                                 .read_text(encoding="utf-8"), "html.parser")
            disturbed = trials[("b1", 3)]["record_id"]
            said = page.select("article.trial p.disturbed")
            assert [p["id"] for p in said] == [f"{disturbed}-disturbed"], (name, language)  # that trial only
            text = said[0].get_text(" ", strip=True)
            assert "other processes used 0.80 of a core" in text  # what crossed the rule, as the runner wrote it
            index = [li.get_text(" ", strip=True) for li in page.select("ol.trial-index li")]
            marked = [line for line in index if ("disturbed" in line or "terganggu" in line)]
            if language == "en":
                assert text.startswith("Disturbed during its measured window:")
                assert ("counts in no figure" in text) is (name == "busy") and ("so it counts." in text) is (name == "allowed")
            else:
                assert text.startswith("Terganggu selama jendela terukurnya:")
            assert len(marked) == (1 if name == "busy" else 0) and (not marked or marked[0].startswith(disturbed))
            # The campaign page's table of every trial marks it too, linking to what disturbed it.
            campaign = BeautifulSoup((tmp_path / f"site-{name}" / folder / "campaigns" / "camp" / "index.html")
                                     .read_text(encoding="utf-8"), "html.parser")
            links = [a["href"] for a in campaign.select("td small.excluded a") if "disturbed" in a["href"]]
            assert links == ([f"trials.html#{disturbed}-disturbed"] if name == "busy" else [])


def test_iteralab_trials_says_which_trial_was_disturbed_and_whether_it_counts(tmp_path, cli):
    trials = write(tmp_path / "busy", {"b1": [1.0, 1.02, 4.6], "b8": [0.5, 0.51, 0.5]}, disturbed={("b1", 3)})
    write(tmp_path / "old", {"b1": [1.0, 1.02, 1.01], "b8": [0.5, 0.51, 0.5]}, old=True)
    code, out, _ = cli("trials", "camp", "--runs", tmp_path / "busy", "--json")
    rows = {row["trial_id"]: row for row in json.loads(out)["trials"]}
    disturbed = trials[("b1", 3)]["record_id"]
    assert code == 0 and [(row["disturbed"], row["set_aside_as_disturbed"]) for row in rows.values()].count((False, False)) == 5
    assert (rows[disturbed]["disturbed"], rows[disturbed]["set_aside_as_disturbed"]) == (True, True)
    code, text, _ = cli("trials", "camp", "--runs", tmp_path / "busy")
    assert [line.split()[0] for line in text.splitlines() if "disturbed: set aside" in line] == [disturbed]
    code, out, _ = cli("trials", "camp", "--runs", tmp_path / "old", "--json")
    assert {row["disturbed"] for row in json.loads(out)["trials"]} == {None}  # not measured, never clean
