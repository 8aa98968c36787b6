"""Decision notes: Markdown files with a front matter block of ``key: value`` lines."""

from __future__ import annotations

import datetime as dt
import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

from iteralab.core.errors import UserError
from iteralab.core.files import writing
from iteralab.core.language import Text
from iteralab.core.lines import json_lines
from iteralab.core.paths import notes_folder
from iteralab.decision.kinds import MODEL
from iteralab.decision.plan import span_range
from iteralab.decision.report import decision_report
from iteralab.decision.text import figures_digest, planned_text
from iteralab.ledger.rental_checks import check_rentals
from iteralab.store.listing import campaign_view_of

FIELDS = ("title", "campaign", "decision", "selected_variant", "workload_covered", "date", "author", "figures")
REQUIRED = ("campaign", "decision", "date", "author")
UNSIGNED = "to fill in"  # the author note new writes until someone signs the note
COMMENT = re.compile(r"<!--.*?-->", re.S)


@dataclass(frozen=True)
class Note:
    """One rendered decision note."""

    slug: str
    source: str
    meta: dict
    html: str
    sha256: str = ""  # of the file as written: the bundle copies it whole, asides included


def _front_matter(text: str, source: str) -> tuple[dict, str]:
    lines = json_lines(text)  # lines end at \n (or \r\n); a U+2028 inside a note's text is not a line break
    if not lines or lines[0].strip() != "---":
        raise UserError(f"{source}:1: a decision note starts with a '---' line, then {', '.join(REQUIRED)} as 'key: value' lines, then '---'")
    meta = {}
    for number, line in enumerate(lines[1:], start=2):
        if line.strip() == "---":
            missing = [key for key in REQUIRED if not meta.get(key)]
            if missing:
                raise UserError(f"{source}: front matter lacks {', '.join(missing)}")
            return meta, "\n".join(lines[number:])
        if not line.strip():
            continue
        match = re.fullmatch(r"([a-z_]+)\s*:\s*(.*)", line.strip())
        if not match or match.group(1) not in FIELDS:
            raise UserError(f"{source}:{number}: expected 'key: value' with key one of {', '.join(FIELDS)}")
        meta[match.group(1)] = match.group(2).strip().strip('"')
    raise UserError(f"{source}: the front matter is not closed by a '---' line")


# A link whose address the sanitiser refused keeps its tag without href (<a rel="noopener noreferrer">), which HTML
# does not allow an rel on: its text is kept, without the tag. The sanitiser's output nests no link in another.
REFUSED_LINK = re.compile(r"<a(?![^>]*\shref=)[^>]*>(.*?)</a>", re.S)


def sanitise(html: str) -> str:
    """Keep only harmless tags and http, https, mailto or relative links (nh3, the Ammonia sanitiser); a link whose
    address is refused is left as its text."""
    import nh3

    # No images: a note's image from another host would be a request the site never makes.
    cleaned = nh3.clean(html, tags=nh3.ALLOWED_TAGS - {"img"}, url_schemes={"http", "https", "mailto"},
                        link_rel="noopener noreferrer")
    return REFUSED_LINK.sub(r"\1", cleaned)


def load_notes(folder: Path | None) -> list[Note]:
    """Read and render every ``*.md`` note in FOLDER (none when FOLDER is None or absent)."""
    import markdown

    if folder is None or not Path(folder).is_dir():
        return []
    notes = []
    for path in sorted(Path(folder).glob("*.md")):
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            raise UserError(f"{path}: not UTF-8 text") from None
        meta, body = _front_matter(text, str(path))
        # Notes are Markdown, not HTML: raw tags are shown as text, and the rendered HTML goes through a maintained
        # sanitiser, since Markdown itself makes links: [x](javascript:...) must not become a clickable script.
        # An HTML comment is the author's aside (note new writes one): never rendered, not even as text.
        safe = COMMENT.sub("", body).replace("<", "&lt;")
        html = sanitise(markdown.markdown(safe, extensions=["tables", "fenced_code"], output_format="html"))
        slug = re.sub(r"[^A-Za-z0-9._-]+", "-", path.stem).strip("-") or "note"
        notes.append(Note(slug, path.name, meta, html, hashlib.sha256(path.read_bytes()).hexdigest()))
    return notes


def note_problems(notes: list[Note], summaries: dict) -> list[str]:
    """Name what a note points at that does not exist, and a note nobody signed: the note is published with a warning.

    SUMMARIES: per campaign, its summary (its ``variants`` name the variants a note may select).
    """
    variants = {name: set(summary["variants"]) for name, summary in summaries.items()}
    problems = []
    for note in notes:
        where, campaign = f"notes/{note.source}", note.meta["campaign"]
        if campaign not in variants:
            problems.append(Text("{where}: campaign {campaign} has no records here; check the note's campaign line",
                                 where=where, campaign=repr(campaign)))
        elif note.meta.get("selected_variant") and note.meta["selected_variant"] not in variants[campaign]:
            problems.append(Text("{where}: selected_variant {variant} is not a variant of {campaign} ({variants})", where=where,
                                 variant=repr(note.meta["selected_variant"]), campaign=campaign,
                                 variants=", ".join(sorted(variants[campaign])) or Text("none")))
        elif note.meta.get("figures") and summaries[campaign].get("figures") not in (None, note.meta["figures"]):
            problems.append(Text("{where}: drafted from figures {signed}, but the records now give figures {now} (a run, an "
                                 "exclusion, a void or an expense changed them): its numbers may no longer be the decision "
                                 "page's; redraft it with iteralab note new {campaign} --again, check it and sign it again",
                                 where=where, signed=note.meta["figures"], now=summaries[campaign]["figures"], campaign=campaign))
        if note.meta["author"].strip().lower() == UNSIGNED:
            problems.append(Text("{where}: unsigned note: the author is still {placeholder}; write who signs the decision",
                                 where=where, placeholder=repr(UNSIGNED)))
    return problems


def draft_text(report, *, author: str, today: str, rentals: list[str] = ()) -> str:
    """Write a decision note draft from a decision report: front matter filled in, reasons, links and rentals written out."""
    # Only a priced configuration is something to rent; otherwise the note says so instead of naming a CPU row.
    chosen = report.cheapest
    decision = chosen.label if chosen else "nothing to rent yet: no feasible configuration runs on a card the catalog prices"
    # Front matter values are single lines; a label never holds a newline, but a title might.
    title = " ".join(f"Decision: {report.title}".split())
    lines = ["---", f"title: {title}", f"campaign: {report.campaign}", f"decision: {decision}"]
    if chosen:
        lines.append(f"selected_variant: {chosen.summary.name}")
    lines += [f"workload_covered: {report.question.workload(report.corpus_entries)}", f"date: {today}", f"author: {author}",
              f"figures: {figures_digest(report)}", "---", "",
              "<!-- Draft written by iteralab note new from the decision report; edit it before publishing. -->", "",
              "## Answer", "", report.answer, "", "## Why", ""]
    for row in report.ranked:
        # A model's row: its time to the validated model (window_seconds), never a corpus's measured window.
        per = (f"median {row.window_seconds[1]:.3f} s per validated model (time to the validated model)" if row.unit == MODEL
               else f"median {row.summary.median:.3f} s per corpus")
        lines.append(f"- **{row.label}**: {per}, projected {span_range(row.hours)}, "
                     f"planned {planned_text(row)}; [evidence](../campaigns/{report.campaign}/index.html#variant-{row.key}).")
    for row in report.infeasible:
        lines.append(f"- {row.label} is not feasible: {'; '.join(row.conditions)}.")
    lines += ["", "## Evidence", "",
              f"- [Decision page](../campaigns/{report.campaign}/decision.html)",
              f"- [Campaign page with every trial](../campaigns/{report.campaign}/index.html)",
              f"- [Evidence bundle](../campaigns/{report.campaign}/evidence-{report.campaign}.zip), checked with `iteralab verify`",
              "", "## Rentals", ""]
    lines += list(rentals) or ["No rental is recorded for this campaign yet (iteralab rental add)."]
    lines += ["", "Match these with the rentals in the IteraGPU account; the receipts are in the evidence bundle.", ""]
    return "\n".join(lines)


def rental_lines(view, links: dict) -> list[str]:
    """Describe each rental of the campaign for the note: what was bought, its receipt, the runs it paid for."""
    lines = []
    for rental in view.rentals:
        paid = [run_id for run_id, found in links.items() if rental in found]
        receipt = f"receipt sha256 {rental['receipt']['sha256'][:12]}…" if rental["receipt"] else "no receipt attached"
        runs = (f"paid for run(s) {', '.join(paid)}" if paid
                else "linked to no run: counted in the campaign's spend, for no configuration")
        lines.append(f"- `{rental['record_id']}`: {rental['lots']} lot(s) {rental['gpu']} × {rental['days']} days from "
                     f"{rental['start']}, {rental['total']} {rental['currency']}; {receipt}; {runs}.")
    return lines


def draft_note(*, campaign: str, runs: Path | str, notes: Path | str | None = None, author: str = "to fill in",
               catalog: Path | str | None = None, again: bool = False) -> tuple[Path, Path | None]:
    """Decide CAMPAIGN and draft its note into the notes folder (default: notes/ beside the runs folder).

    AGAIN: an existing note is moved to the folder's superseded/ (kept, never rendered) and drafted anew. Return the
    draft and where the earlier note went.
    """
    report = decision_report(campaign=campaign, runs=runs, catalog=catalog)
    view = campaign_view_of(runs, campaign)
    return write_draft(report, folder=notes_folder(runs, notes), author=author,
                       rentals=rental_lines(view, check_rentals(view)[0]), again=again)


def write_draft(report, *, folder: Path, author: str, rentals: list[str] = (), again: bool = False) -> tuple[Path, Path | None]:
    """Write FOLDER/CAMPAIGN-decision.md from REPORT, never over an existing note (AGAIN: moved aside first)."""
    folder = Path(folder)
    path = folder / f"{report.campaign}-decision.md"
    earlier = None
    if path.exists() and again:
        earlier = _superseded_place(folder, path)
        with writing(earlier, "the superseded note"):
            earlier.parent.mkdir(parents=True, exist_ok=True)
            path.rename(earlier)  # on the same disk: the note is never copied half, and never lost
    elif path.exists():
        raise UserError(f"{path} already exists; it was not overwritten (edit it, or draft it again with --again, which "
                        "keeps it in superseded/)")
    text = draft_text(report, author=author, today=dt.date.today().isoformat(), rentals=rentals)
    with writing(path, "the decision note draft"), open(path, "x", encoding="utf-8") as handle:
        handle.write(text)
    return path, earlier


def _superseded_place(folder: Path, path: Path) -> Path:
    """Return a free name for PATH in FOLDER/superseded/: its name, then -2, -3... (a note there is never replaced)."""
    number = 1
    while True:
        place = folder / "superseded" / (path.name if number == 1 else f"{path.stem}-{number}{path.suffix}")
        if not place.exists():
            return place
        number += 1
