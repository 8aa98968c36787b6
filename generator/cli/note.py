"""iteralab note: draft decision notes for the team to edit before publishing."""

from __future__ import annotations

import click

from iteralab.cli.options import FOLDER, catalog_option, emit, json_option, runs_option
from iteralab.pages import notes


@click.group()
def note():
    """Draft decision notes (Markdown) for the team to edit before publishing."""


@note.command("new")
@click.argument("campaign")
@runs_option()
@click.option("--notes", "notes_dir", type=FOLDER, help="notes folder (default: notes/ beside the runs folder)")
@click.option("--author", default="to fill in", help="author named in the front matter")
@click.option("--again", is_flag=True, help="draft anew over an existing note, which moves to superseded/ in the notes folder")
@catalog_option
@json_option
def note_new(campaign, runs, notes_dir, author, again, catalog, as_json):
    """Draft a decision note (Markdown) from the decision report, for the team to edit before publishing."""
    path, earlier = notes.draft_note(campaign=campaign, runs=runs, notes=notes_dir, author=author, catalog=catalog, again=again)
    moved = f" (the earlier note is kept as {earlier}, not published)" if earlier else ""
    emit(as_json, {"path": str(path), "superseded": str(earlier) if earlier else None},
         f"Drafted {path}{moved}: edit it, then iteralab build")
