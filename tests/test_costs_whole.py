"""Other project costs (ledger/costs.py) asserted whole: every field of an expense record, where its receipt lands,
every refusal and every line that describes them (#48)."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import re
from types import SimpleNamespace

import pytest

from iteralab.core.errors import UserError
from iteralab.ledger import costs
from iteralab.ledger.exclusions import campaign_view
from iteralab.store import reading, records
from tests import factory
from tests.test_decision import CPU, RTX_4090, write_machine
from tests.test_exclusions import A1, A8, CPU1

RECORD_ID = re.compile(r"^expense-\d{8}T\d{6}Z-[0-9a-f]{12}$")
RUN_ID = re.compile(r"^run-expense-\d{8}T\d{6}Z-[0-9a-f]{12}$")
SETUP = "two setup hours paid on the RTX 4090 machine only"


@pytest.fixture
def runs(tmp_path):
    """One RTX 4090 machine's run of campaign `merged`: configurations A1 and A8, and no other cost yet."""
    folder = tmp_path / "runs"
    write_machine(folder, "run-4090", RTX_4090, {"b1": [100, 102, 104, 106, 108], "b8": [30, 31, 32, 33, 34]})
    return folder


def _keys(runs) -> dict:
    """Each configuration's label and its key (the id an expense names)."""
    return {summary.label: summary.key for summary in campaign_view(runs, "merged").variants}


def _add(runs, **options) -> dict:
    stated = {"runs_dir": runs, "campaign": "merged", "amount": "12.50", "currency": "USD", "justification": SETUP,
              "date": "2026-09-29"}
    return costs.add_expense(**{**stated, **options})


def _listed(runs, expenses=None) -> list[dict]:
    """EXPENSES, or the campaign's as listed, by record id: each is in a records file of its own, named by a random id."""
    found = costs.list_expenses(runs_dir=runs, campaign="merged") if expenses is None else expenses
    return sorted(found, key=lambda record: record["record_id"])


def _whole(record: dict, **fields) -> dict:
    """The expense record expected: the common fields of every record, then FIELDS; ids and time taken from RECORD."""
    assert RECORD_ID.match(record["record_id"]) and RUN_ID.match(record["run_id"])
    assert dt.datetime.fromisoformat(record["created_at"]).tzinfo is not None
    common = {"schema_version": records.SCHEMA_VERSION, "kind": "expense", "record_id": record["record_id"],
              "campaign": "merged", "run_id": record["run_id"], "created_at": record["created_at"]}
    return {**common, "amount": "12.50", "currency": "USD", "justification": SETUP, "receipt": None,
            "incurred_on": "2026-09-29", **fields}


def _decide(cli, runs) -> dict:
    code, out, err = cli("decide", "merged", "--runs", runs, "--json")
    assert (code, err) == (0, "")
    data = json.loads(out)
    return {row["label"]: row for row in data["ranked"] + data["infeasible"]}


def test_an_expense_for_every_configuration_reaches_a_configuration_measured_later(runs, cli, tmp_path):
    """Regression for #48: --all-configurations is saved as "all", not as today's list, so a configuration measured
    after the expense carries its share like the others."""
    keys = _keys(runs)
    record = _add(runs, all_configurations=True)
    assert record == _whole(record, applies_to="all", configuration_labels=[A1, A8])
    assert costs.list_expenses(runs_dir=runs, campaign="merged") == [record]
    # A CPU machine's run measured after the expense was recorded, merged by copying.
    write_machine(tmp_path / "later", "run-cpu", CPU, {"b1": [500, 510, 520, 530, 540]})
    for path in (tmp_path / "later").rglob("*.jsonl"):
        target = runs / path.relative_to(tmp_path / "later")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(path.read_bytes())
    rows = _decide(cli, runs)
    assert set(rows) == {A1, A8, CPU1} and set(keys) == {A1, A8}
    for label in (A1, A8, CPU1):
        assert rows[label]["other_costs"] == {"total": "12.50", "currency": "USD", "reason": None,
                                              "expenses": [record["record_id"]]}


def test_an_expense_for_named_configurations_keeps_their_keys_and_labels_once_in_the_campaigns_order(runs):
    keys = _keys(runs)
    record = _add(runs, configurations=(A8, keys[A8], keys[A1]))
    assert record == _whole(record, applies_to=[keys[A1], keys[A8]], configuration_labels=[A1, A8])
    single = _add(runs, configurations=[keys[A8]], amount=" 7 ", currency=" IDR ",
                  justification="  two   setup hours \n paid  on the RTX 4090 machine only ")
    assert single == _whole(single, applies_to=[keys[A8]], configuration_labels=[A8], amount="7.00", currency="IDR",
                            justification="two setup hours paid on the RTX 4090 machine only")
    assert _listed(runs) == _listed(runs, [record, single])


def test_the_receipt_lands_under_the_campaigns_receipts_folder_by_its_sha256(runs, tmp_path):
    """Regression for #48: the copy is filed at runs/CAMPAIGN/receipts/SHA256[:16]/NAME (never runs/None/receipts/)."""
    bill = tmp_path / "bill.pdf"
    bill.write_bytes(b"%PDF-1.4 setup hours, 12.50 USD\n")
    digest = hashlib.sha256(bill.read_bytes()).hexdigest()
    before = {path for path in runs.rglob("*")}
    record = _add(runs, all_configurations=True, receipt=bill)
    place = f"merged/receipts/{digest[:16]}/bill.pdf"
    receipt = {"path": place, "sha256": digest, "size_bytes": 32, "original_name": "bill.pdf"}
    assert record == _whole(record, applies_to="all", configuration_labels=[A1, A8], receipt=receipt)
    assert (runs / place).read_bytes() == bill.read_bytes()
    new = sorted(str(path.relative_to(runs)) for path in set(runs.rglob("*")) - before if path.is_file())
    assert new == [place, f"merged/records/{record['run_id']}.jsonl"]
    assert costs.describe_expense(record) == (
        f"Recorded {record['record_id']}: 12.50 USD on 2026-09-29 for every configuration ({SETUP}); receipt {place}")


def test_a_receipt_already_counted_is_refused_with_the_record_that_holds_it(runs, tmp_path):
    bill = tmp_path / "bill.pdf"
    bill.write_bytes(b"one paid amount\n")
    digest = hashlib.sha256(bill.read_bytes()).hexdigest()
    first = _add(runs, all_configurations=True, receipt=bill)
    files = {path: path.read_bytes() for path in runs.rglob("*") if path.is_file()}
    with pytest.raises(UserError) as error:
        _add(runs, configurations=[A8], receipt=bill, amount="3")
    assert str(error.value) == (
        f"receipt {bill} (sha256 {digest[:12]}…) is already recorded for merged by expense {first['record_id']}; one "
        f"receipt is one cost. If that record is wrong, iteralab void {first['record_id']} --reason '...' first; nothing "
        "was recorded")
    assert {path: path.read_bytes() for path in runs.rglob("*") if path.is_file()} == files


def test_another_receipt_and_a_missing_one_are_told_apart(runs, tmp_path):
    (tmp_path / "a.pdf").write_bytes(b"first")
    (tmp_path / "b.pdf").write_bytes(b"second")
    _add(runs, all_configurations=True, receipt=tmp_path / "a.pdf")
    second = _add(runs, all_configurations=True, receipt=tmp_path / "b.pdf")
    assert second["receipt"]["original_name"] == "b.pdf"
    with pytest.raises(UserError) as error:
        _add(runs, all_configurations=True, receipt=tmp_path / "gone.pdf")
    assert str(error.value) == f"receipt {tmp_path / 'gone.pdf'} is not a file"


@pytest.mark.parametrize(("options", "message"), [
    ({}, "name the configurations the expense applies to (--configuration, repeat it) or give --all-configurations, one "
         "of the two"),
    ({"configurations": [A8], "all_configurations": True},
     "name the configurations the expense applies to (--configuration, repeat it) or give --all-configurations, one "
     "of the two"),
    ({"configurations": [A8, "b8 on a TPU", "b2"]},
     f"--configuration 'b8 on a TPU' is not a configuration of campaign merged (its configurations: {A1}; {A8})"),
    ({"all_configurations": True, "currency": "usd"}, "--currency 'usd' is not an ISO 4217 code such as USD or IDR"),
    ({"all_configurations": True, "currency": "USDX"}, "--currency 'USDX' is not an ISO 4217 code such as USD or IDR"),
    ({"all_configurations": True, "justification": " \n "},
     "--justification must say why this cost really applies, in under 2,000 characters"),
    ({"all_configurations": True, "justification": "x" * 2001},
     "--justification must say why this cost really applies, in under 2,000 characters"),
    ({"all_configurations": True, "amount": "12.505"},
     "--amount '12.505' is not an amount such as 12.50: digits, at most two decimals, no sign or separator"),
    ({"all_configurations": True, "amount": "1234567890123456"},
     "--amount '1234567890123456' is not an amount such as 12.50: digits, at most two decimals, no sign or separator"),
    ({"all_configurations": True, "amount": "12."},
     "--amount '12.' is not an amount such as 12.50: digits, at most two decimals, no sign or separator"),
    ({"all_configurations": True, "amount": "x12.50"},
     "--amount 'x12.50' is not an amount such as 12.50: digits, at most two decimals, no sign or separator"),
    ({"all_configurations": True, "amount": "12.50x"},
     "--amount '12.50x' is not an amount such as 12.50: digits, at most two decimals, no sign or separator"),
    ({"all_configurations": True, "date": "28/09/2026"}, "--date '28/09/2026' is not a day such as 2026-09-28"),
    ({"campaign": "other"}, "campaign other has no trials in {runs}: run it first, or pass --runs"),
])
def test_a_wrong_expense_is_refused_whole_and_nothing_is_written(runs, options, message):
    files = {path: path.read_bytes() for path in runs.rglob("*") if path.is_file()}
    with pytest.raises(UserError) as error:
        _add(runs, **options)
    assert str(error.value) == message.format(runs=runs)
    assert {path: path.read_bytes() for path in runs.rglob("*") if path.is_file()} == files


def test_amounts_and_days_are_read_exactly():
    assert costs._amount("123456789012345.5") == "123456789012345.50"
    assert (costs._amount(" 0 "), costs._amount("1.05"), costs._amount(3)) == ("0.00", "1.05", "3.00")
    assert costs._day(" 2026-09-28 ") == "2026-09-28"
    assert costs._day(dt.date(2026, 2, 28)) == "2026-02-28"
    with pytest.raises(UserError) as error:
        costs._day("2026-02-30")
    assert str(error.value) == "--date '2026-02-30' is not a day such as 2026-09-28"


def test_an_expense_without_a_day_is_incurred_today_in_utc(runs, monkeypatch):
    asked = []

    class Clock(dt.datetime):
        @classmethod
        def now(cls, tz=None):
            asked.append(tz)
            return dt.datetime(2026, 9, 30, 23, 59, tzinfo=dt.UTC)

    monkeypatch.setattr(costs, "dt", SimpleNamespace(datetime=Clock, date=dt.date, UTC=dt.UTC))
    record = _add(runs, all_configurations=True, date=None)
    assert record["incurred_on"] == "2026-09-30" and asked == [dt.UTC]


def test_a_justification_of_exactly_2000_characters_is_kept(runs):
    record = _add(runs, all_configurations=True, justification="y" * 2000)
    assert record["justification"] == "y" * 2000


def test_expenses_are_described_and_listed_line_by_line(runs, tmp_path, cli):
    keys = _keys(runs)
    assert costs.list_expenses(runs_dir=tmp_path / "nowhere", campaign="merged") == []
    assert costs.describe_expenses([], "merged") == "no expense recorded for merged"
    both = _add(runs, configurations=[A1, A8])
    every = _add(runs, all_configurations=True, amount="3", justification="storage")
    assert costs.describe_expense(both) == (
        f"Recorded {both['record_id']}: 12.50 USD on 2026-09-29 for {A1}; {A8} ({SETUP}); no receipt")
    listed = _listed(runs)
    assert listed == _listed(runs, [every, both]) and both["applies_to"] == [keys[A1], keys[A8]]
    assert costs.describe_expenses([both, every], "merged") == (
        f"{both['record_id']}: 12.50 USD on 2026-09-29 for {A1}; {A8}: {SETUP}\n"
        f"{every['record_id']}: 3.00 USD on 2026-09-29 for every configuration: storage")
    with pytest.raises(UserError) as error:
        costs.list_expenses(runs_dir=runs, campaign="../merged")
    assert str(error.value).startswith("campaign '../merged' is not a valid name")
    assert _listed(runs, reading.load(runs).of_campaign("merged", "expense")) == listed


def test_a_receipt_a_rental_already_holds_is_refused_too(runs, tmp_path):
    bill = tmp_path / "invoice.pdf"
    bill.write_bytes(b"the package and the setup on one invoice\n")
    digest = hashlib.sha256(bill.read_bytes()).hexdigest()
    rental = {**factory.rental("merged", runs=["run-4090"]), "receipt": {
        "path": f"merged/receipts/{digest[:16]}/invoice.pdf", "sha256": digest, "size_bytes": 41,
        "original_name": "invoice.pdf"}}
    (runs / rental["receipt"]["path"]).parent.mkdir(parents=True)
    (runs / rental["receipt"]["path"]).write_bytes(bill.read_bytes())
    records.append(runs, rental)
    with pytest.raises(UserError) as error:
        _add(runs, all_configurations=True, receipt=bill)
    assert str(error.value) == (
        f"receipt {bill} (sha256 {digest[:12]}…) is already recorded for merged by rental {rental['record_id']}; one "
        f"receipt is one cost. If that record is wrong, iteralab void {rental['record_id']} --reason '...' first; nothing "
        "was recorded")
