"""Which prediction files a campaign has, read from the folders its trials name, not from a listing of every file (#45)."""

from __future__ import annotations

import posixpath

import pandas as pd

from iteralab.site import incremental
from iteralab.site.output import list_files
from iteralab.store.reading import RecordTable

ODD = ["a/predictions/t1.csv", "a/./predictions/t1.csv", "a/predictions/../predictions/sub/t2.csv", "a/linked/t1.csv",
       "a/predictions/link.csv", "a/predictions/missing.csv", "/etc/passwd", "../outside.csv", "top.csv", "", ".",
       "a/predictions/", "a/predictions/t1.csv/x", "a/predictions/sub", "a\x00b/t.csv", "x" * 5000 + "/t.csv", None,
       "b/predictions/t3.csv", "a//predictions/t1.csv", "a/predictions/.."]


def _table(paths: list) -> RecordTable:
    campaigns = ["b" if isinstance(path, str) and path.startswith("b/") else "a" for path in paths]
    return RecordTable(pd.DataFrame({"campaign": campaigns, "predictions_path": paths}), [], [], [])


def _runs(tmp_path):
    for relative in ("a/predictions/t1.csv", "a/predictions/sub/t2.csv", "top.csv", "b/predictions/t3.csv", "outside.csv"):
        (tmp_path / relative).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / relative).write_text(relative, encoding="utf-8")
    (tmp_path / "a" / "linked").symlink_to(tmp_path / "a" / "predictions", target_is_directory=True)
    (tmp_path / "a" / "predictions" / "link.csv").symlink_to(tmp_path / "top.csv")
    return tmp_path


def test_the_files_found_present_are_those_a_listing_of_every_file_holds(tmp_path):
    """The folders a campaign names are listed alone; what is present is what the whole listing said before, odd paths too."""
    runs = _runs(tmp_path)
    table = _table(ODD)
    positions = incremental.groups(table)
    listing = {relative for relative, _ in list_files(runs)}
    paths = table.frame["predictions_path"].tolist()
    expected = {name: frozenset(posixpath.normpath(paths[row]) for row in rows if isinstance(paths[row], str)
                                and posixpath.normpath(paths[row]) in listing) for name, rows in positions.items()}
    assert incremental.present_predictions(table, positions, runs) == expected
    assert expected["a"] == {"a/predictions/t1.csv", "a/predictions/sub/t2.csv", "a/predictions/link.csv", "top.csv"}


def test_a_campaigns_prediction_folders_stand_for_their_names_in_its_key(tmp_path):
    """A file added to a folder a campaign names changes its key; one added elsewhere changes none."""
    runs = _runs(tmp_path)
    table = _table(ODD)
    positions = incremental.groups(table)
    folders = incremental.prediction_folders(table, positions)
    assert folders["b"] == {"b/predictions"}
    assert {"a/predictions", "a/predictions/sub", "a/linked", "", "/etc", ".."} <= folders["a"]

    def stamps() -> dict:
        listed = {relative[:-1]: entry for relative, entry in list_files(runs, summarised=True) if relative.endswith("/")}
        found = incremental.folder_stamps(runs, set().union(*folders.values()), listed)
        return {name: sorted((folder, found[folder]) for folder in folders[name]) for name in folders}

    before = stamps()
    assert dict(before["a"])["a\x00b"] == "-"  # a name no system takes: nothing there, never an error
    (runs / "b" / "predictions" / "t4.csv").write_text("new", encoding="utf-8")
    after = stamps()
    assert after["b"] != before["b"] and after["a"] == before["a"]
    (runs / "a" / "predictions" / "sub" / "t5.csv").write_text("new", encoding="utf-8")
    assert stamps()["a"] != after["a"]
