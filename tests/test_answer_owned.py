"""A configuration that needs no rental (a CPU the catalog does not price) is the answer's first word where it meets
the question; where it misses only the deadline or the window, the answer says what renting would add (#45)."""

from __future__ import annotations

import json
import shutil

from bs4 import BeautifulSoup

from iteralab.site.build import build_site
from iteralab.store import records
from tests import factory
from tests.test_answer_whole import A1, CPU1, OPEN, TEN, WIDE, merged
from tests.test_decision import CPU, RTX_4090, report_of

WITHOUT = "meets the question without a rental"
# The CPU's b1 takes 500-540 s a corpus: ten corpora are projected at 1.39 h to 1.50 h.
SLOW = {"b1": [500, 510, 520, 530, 540]}
FIRST = (f"{CPU1} meets the question without a rental: it meets the quality thresholds and is projected at 50.0 s to "
         f"50.0 s for {TEN} within the 96 h access window.")
FIRST_ID = (f"{CPU1} memenuhi pertanyaan ini tanpa sewa: konfigurasi ini memenuhi ambang batas kualitas dan diproyeksikan "
            "50,0 s hingga 50,0 s untuk 10 korpus independen seperti korpus kampanye dalam jendela akses 96 jam.")
NOTHING_ASKED = "Renting adds nothing the question asks for; a card is worth measuring only to compare."


def test_a_cpu_that_meets_the_question_is_said_first_then_that_renting_adds_nothing_then_the_card_to_measure(tmp_path, cli):
    runs = merged(tmp_path / "runs", ("run-cpu", CPU, {"b1": [5, 5, 5, 5, 5]}), question=WIDE)
    report = report_of(runs)[0]
    assert report.next_step == f"{FIRST} {NOTHING_ASKED}"
    assert report.points[0].startswith("Measure next on RTX 4090, the cheapest card not measured for this window: ")
    assert report.answer.startswith(f"{FIRST} {NOTHING_ASKED} Measure next on RTX 4090")
    assert "Nothing to rent yet" not in report.answer and "package spend is" not in report.answer
    assert report.owned is report.ranked[0] and report.summary_line == f"no rental needed: {CPU1} meets the question"
    # The one composition, in `decide`'s text and JSON, in both languages.
    code, text, _ = cli("decide", "merged", "--runs", runs)
    assert code == 0 and text.startswith(f"Decision report for merged (catalog 2026-09-24)\n\n{FIRST} {NOTHING_ASKED}")
    code, out, _ = cli("decide", "merged", "--runs", runs, "--json", "--lang", "id")
    data = json.loads(out)
    assert data["answer"] == report.answer and data["answer_said"].startswith(FIRST_ID)
    assert data["owned"] == report.owned.key == data["ranked"][0]["configuration"]  # the row it names, by its key


def test_a_deadline_the_cpu_meets_is_said_with_it(tmp_path):
    runs = merged(tmp_path / "runs", ("run-cpu", CPU, SLOW), question={**OPEN, "deadline_hours": "2"})
    assert report_of(runs)[0].next_step.startswith(
        f"{CPU1} meets the question without a rental: it meets the quality thresholds and is projected at 1.39 h to 1.50 h "
        f"for {TEN} within the 72 h access window, within the 2 h until the deadline. Renting adds nothing the question "
        "asks for")


def test_beside_a_priced_rental_the_cpu_comes_first_and_the_rental_only_compares(tmp_path):
    runs = merged(tmp_path / "runs", ("run-4090", RTX_4090, {"b1": [30, 31, 32, 33, 34]}), ("run-cpu", CPU, SLOW))
    report = report_of(runs)[0]
    assert report.next_step.startswith(f"{CPU1} {WITHOUT}: ")
    assert report.next_step.endswith(f"Renting adds nothing the question asks for; the cheapest feasible rental, {A1}, "
                                     "plans 47.14 USD and is projected at up to 5.7 min.")
    assert report.cheapest.label == A1  # still the cheapest rental, for the table and the comparison


def test_a_cpu_that_misses_the_deadline_is_not_said_to_meet_it_and_renting_adds_finishing_in_time(tmp_path):
    runs = merged(tmp_path / "runs", ("run-4090", RTX_4090, {"b1": [30, 31, 32, 33, 34]}), ("run-cpu", CPU, SLOW),
                  question={**OPEN, "deadline_hours": "1"})
    report = report_of(runs)[0]
    assert WITHOUT not in report.answer and report.owned is None
    assert report.next_step == "Rent 1 lot of RTX 4090, one 3-day package, for 47.14 USD, and run b1 there."
    assert report.points[0] == (
        f"Without a rental, {CPU1} meets the quality thresholds but misses the deadline (projected up to 1.50 h, against "
        "1 h until the deadline): what renting would add is finishing before it, on a card fast enough.")
    assert report.summary_line == f"{A1}: planned 47.14 USD, projected up to 5.7 min"


def test_a_cpu_alone_that_does_not_fit_the_window_leaves_the_answer_to_measuring_and_says_what_renting_adds(tmp_path):
    short = {**OPEN, "window_start": None, "window_end": None, "window_hours": "1"}
    report = report_of(merged(tmp_path / "runs", ("run-cpu", CPU, SLOW), question=short))[0]
    assert WITHOUT not in report.answer
    assert report.next_step.startswith("Nothing to rent yet: no configuration measured so far meets every condition. "
                                       "Measure next on ")
    assert report.points == (
        f"Without a rental, {CPU1} meets the quality thresholds but does not fit the access window (projected up to 1.50 "
        "h, against a 1 h window): what renting would add is fitting the work in the window, on a card fast enough.",
        "All 1 configuration(s) measured fail a condition listed below.")


def test_a_cpu_that_also_fails_quality_is_not_offered_as_what_renting_would_fix(tmp_path):
    manifest = factory.manifest("merged", "run-cpu", environment=CPU, decision={**OPEN, "deadline_hours": "1"})
    records.append(tmp_path, manifest)
    for repetition, seconds in enumerate(SLOW["b1"], start=1):  # past the deadline, and below the accuracy threshold
        records.append(tmp_path, factory.trial(manifest, "b1", seconds=seconds, repetition=repetition, sequence=repetition,
                                               accuracy=0.5))
    (row,) = (report := report_of(tmp_path)[0]).rows
    assert len(row.conditions) == 2 and row.owned
    assert "Without a rental" not in report.answer and WITHOUT not in report.answer


def test_without_a_cpu_the_answer_is_unchanged(tmp_path):
    runs = merged(tmp_path / "runs", ("run-4090", RTX_4090, {"b1": [30, 31, 32, 33, 34]}))
    report = report_of(runs)[0]
    assert report.next_step == "Rent 1 lot of RTX 4090, one 3-day package, for 47.14 USD, and run b1 there."
    assert "rental" not in report.answer and report.owned is None


def test_the_decision_and_campaign_pages_say_the_cpu_first_in_both_languages(tmp_path):
    runs = merged(tmp_path / "runs", ("run-cpu", CPU, {"b1": [5, 5, 5, 5, 5]}), question=WIDE)
    out = tmp_path / "site"
    build_site(runs=runs, out=out, languages=("en", "id"))
    for folder, first, answer_word, summary in (("", FIRST, "Answer.", "no rental needed: "),
                                                ("id", FIRST_ID, None, "tidak perlu sewa: ")):
        decision = BeautifulSoup((out / folder / "campaigns" / "merged" / "decision.html").read_text(encoding="utf-8"),
                                 "html.parser")
        said = decision.select_one("#answer p").get_text(" ", strip=True)
        word = decision.select_one("#answer p strong").get_text(strip=True)
        assert answer_word in (None, word) and said == f"{word} {first} " + (
            NOTHING_ASKED if folder == "" else "Menyewa tidak menambahkan apa pun yang ditanyakan pertanyaan ini; sebuah "
            "kartu layak diukur hanya untuk membandingkan.")
        # Which phases a fresh process pays once, and that the projection counts them once per lot (#45).
        once = decision.select_one("#once-per-process").get_text(" ", strip=True)
        assert once.startswith(("Once per process: the first trial", "Sekali per proses: uji pertama"))
        campaign = BeautifulSoup((out / folder / "campaigns" / "merged" / "index.html").read_text(encoding="utf-8"),
                                 "html.parser")
        assert campaign.select_one("#decision-link").get_text(" ", strip=True).split(": ", 1)[1].startswith(first)
        index = BeautifulSoup((out / folder / "index.html").read_text(encoding="utf-8"), "html.parser")
        assert f"{summary}{CPU1}" in index.get_text(" ", strip=True)


def test_a_stated_budget_does_not_make_a_cpu_that_needs_no_rental_infeasible(tmp_path):
    """A budget is a ceiling on package spend: a CPU the catalog does not price buys no package, so it spends nothing
    of it. Its row used to fail 'budget: cannot be checked (not in the catalog: CPU)' and the answer fell to renting."""
    runs = merged(tmp_path / "runs", ("run-cpu", CPU, {"b1": [5, 5, 5, 5, 5]}), question={**WIDE, "budget": "10.00"})
    report = report_of(runs)[0]
    (row,) = report.rows
    assert row.owned and row.conditions == () and row.feasible
    assert report.owned is row and report.next_step.startswith(f"{CPU1} {WITHOUT}: ")
    # A priced rental beside it is still held to the budget.
    runs = merged(tmp_path / "both", ("run-4090", RTX_4090, {"b1": [30, 31, 32, 33, 34]}), ("run-cpu", CPU, SLOW),
                  question={**OPEN, "budget": "10.00"})
    rented = next(row for row in report_of(runs)[0].rows if not row.owned)
    assert any(str(condition).startswith("budget: planned 47.14 exceeds the ceiling 10.00") for condition in rented.conditions)


def test_asked_again_the_answer_is_the_cpu_it_names_first_not_the_cheapest_rental(tmp_path):
    """Two revisions where the CPU meets the question both times and only the rental beside it changes (another card):
    the answer, which names the CPU first, did not change. Judged by the cheapest rental it was said to have changed."""
    from iteralab.decision.revisions import compare_campaigns
    from tests.test_decision import RTX_6000_ADA, write_machine

    runs = tmp_path / "runs"
    again = {**WIDE, "asks_again": "first"}
    for campaign, run_id, card, question in (("first", "run-a", RTX_4090, WIDE), ("again", "run-b", RTX_6000_ADA, again)):
        for machine, environment, durations in ((run_id, card, {"b1": [30, 31, 32, 33, 34]}),
                                                (f"{run_id}-cpu", CPU, {"b1": [5, 5, 5, 5, 5]})):
            write_machine(tmp_path / machine, machine, environment, durations, question=question, campaign=campaign)
            shutil.copytree(tmp_path / machine, runs, dirs_exist_ok=True)
    comparison = compare_campaigns(earlier="first", later="again", runs=runs)
    assert comparison.answer_changed is False, comparison.answer
    assert str(comparison.answer).startswith(f"The answer is unchanged: {CPU1.split(' · torch')[0]}")
