"""Build the static site: records, catalog and notes rendered through Jinja2 templates."""


from __future__ import annotations

import importlib
import shutil
from pathlib import Path

from iteralab.core import language
from iteralab.core.errors import UserError
from iteralab.core.paths import DEFAULT_RUNS, notes_folder, sheets_folder
from iteralab.evidence import signing
from iteralab.site.output import STATE_FILE, inputs_digest, list_files, read_head, software

# A rebuild with nothing to do imports what it needs to tell so (the listing, the inputs' digest, the state's first
# line); what a build with work does is in site/changed.py, imported only then, with the record table's libraries, the
# pages and the decision (a no-change rebuild of 1,000 campaigns spent 0.1 s importing them, as long as it took to decide
# there was nothing to do).
CHANGED = "iteralab.site.changed"


def _refuse_nested(runs: Path, out: Path) -> None:
    """Refuse a site folder inside the evidence, or evidence inside the site folder a build rewrites."""
    runs_at, out_at = runs.resolve(), out.resolve()
    if out_at == runs_at or out_at.is_relative_to(runs_at):
        raise UserError(f"--out {out} is inside the runs folder {runs}: the site would be written among the evidence; "
                        "choose a folder outside it, e.g. --out site; nothing was written")
    if runs_at.is_relative_to(out_at):
        raise UserError(f"the runs folder {runs} is inside --out {out}: a build rewrites that folder; keep the records "
                        "outside it; nothing was written")


def build_site(*, runs: Path | str = DEFAULT_RUNS, out: Path | str = "site", notes: Path | str | None = None,
               catalog: Path | str | None = None, sheets: Path | str | None = None,
               processes: int | None = None, languages: tuple[str, ...] | list[str] | None = None,
               base_url: str | None = None, sign_key: Path | str | None = None, quiet: bool = False) -> dict:
    """Render every page in each of LANGUAGES; campaigns whose inputs did not change since the last build are skipped.

    The first language is built into OUT, each other one into OUT/CODE/, every page linking to its twin in the others.
    LANGUAGES None: every language OUT already holds (English alone in a new one). A language OUT holds that LANGUAGES
    leaves out is removed, never left behind with stale pages. PROCESSES renders campaigns on that many cores (default: every core when there are thousands of trials).
    BASE_URL: where the site is published (https://host/team/site/ or /team/site/), for the one page a host serves at
    any path, 404.html; every other page links relatively and needs none. SIGN_KEY: an OpenSSH key that signs each
    evidence bundle (QUIET: never ask for its passphrase).
    """
    runs, out = Path(runs), Path(out)
    top, held = held_languages(out)
    codes = _languages(languages) if languages else (top, *held)
    base_path = served_path(base_url)
    signer = signing.signer(sign_key, quiet=quiet, many=True) if sign_key else None  # checked before anything is written
    if not runs.is_dir():
        raise UserError(f"{runs} is not a folder: pass the runs folder that holds the records")
    inputs = _Inputs(runs)
    results = {}
    for code in codes:
        others = tuple((other, language.LANGUAGES[other], _prefix(code, other, codes[0])) for other in codes if other != code)
        with language.speaking(code):
            results[code] = _build_language(inputs=inputs, out=out if code == codes[0] else out / code, notes=notes,
                                            catalog=catalog, sheets=sheets, processes=processes,
                                            alternates=others, base_path=base_path, signer=signer,
                                            feed_base=_feed_base(base_url, None if code == codes[0] else code))
    removed = [code for code in held if code not in codes[1:]]  # the top language's old folder too
    for code in removed:  # built before, left out now: its pages would be served stale, unlinked from the others
        shutil.rmtree(out / code, ignore_errors=True)
    result = dict(results[codes[0]])
    result["removed_languages"] = removed
    result["languages"] = {code: {"index": found["index"], "rendered": found["rendered"], "copied": found["copied"],
                                  "written": found["written"], "unchanged": found["unchanged"]}
                           for code, found in results.items()}
    return result


def served_path(base_url: str | None) -> str:
    """Return the path a site published at BASE_URL is served under ('/' when None), ending in '/'."""
    from urllib.parse import urlsplit

    if base_url is None:
        return "/"
    parts = urlsplit(base_url)
    if parts.scheme not in ("", "http", "https") or (parts.scheme and not parts.netloc) or not parts.path.startswith("/") \
            or parts.query or parts.fragment or "\\" in base_url or any(part in (".", "..") for part in parts.path.split("/")):
        raise UserError(f"--base-url {base_url!r} is not where a site can be published: give the address of its index "
                        "page's folder, such as https://example.org/team/site/ or /team/site/; nothing was written")
    return parts.path if parts.path.endswith("/") else f"{parts.path}/"


def _feed_base(base_url: str | None, code: str | None) -> str:
    """Return what the feed's links start with: the published address (of CODE's folder), or nothing (relative links)."""
    if not base_url:
        return ""
    base = base_url if base_url.endswith("/") else f"{base_url}/"
    return f"{base}{code}/" if code else base


def held_languages(out: Path) -> tuple[str, tuple[str, ...]]:
    """Return the language an earlier build wrote at the top of OUT (English for a new one) and those it wrote into
    OUT/CODE/, each folder with its build state."""
    top = read_head(Path(out) / STATE_FILE).get("language")
    top = top if top in language.LANGUAGES else language.DEFAULT
    return top, tuple(code for code in language.LANGUAGES if code != top and (Path(out) / code / STATE_FILE).is_file())


def _languages(requested) -> tuple[str, ...]:
    """Check the requested language codes: known ones, each once, in the order given."""
    codes = tuple(dict.fromkeys(requested))
    unknown = [code for code in codes if code not in language.LANGUAGES]
    if unknown or not codes:
        raise UserError(f"unknown language {', '.join(unknown) or '(none)'}: choose from {', '.join(language.LANGUAGES)} "
                        "(--lang en --lang id builds both); nothing was written")
    return codes


def _prefix(code: str, other: str, first: str) -> str:
    """Return the path from CODE's site root to OTHER's: the first language at the top, the others in CODE/ below it."""
    if code == first:
        return f"{other}/"
    return "../" if other == first else f"../{other}/"


class _Inputs:
    """What every language's build reads alike: the runs folder's listing, and its record table once one needs it
    (``changed.record_table``)."""

    def __init__(self, runs: Path):
        # Each campaign's predictions folder is one entry: its times stand for its names (listing 100,000 of them took a
        # third of a second); only the changed campaigns' folders are listed, when they are rendered.
        self.runs, self.summary, self.table = runs, list_files(runs, summarised=True), None
        self.folders = {relative[:-1]: entry for relative, entry in self.summary if relative.endswith("/")}


def _build_language(*, inputs: _Inputs, out: Path, notes, catalog, sheets, processes,
                    alternates: tuple, base_path: str = "/", signer: signing.Signer | None = None, feed_base: str = "") -> dict:
    """Build the site in the current language into OUT."""
    runs, out = inputs.runs, Path(out)
    _refuse_nested(runs, out)
    notes_dir, catalog_file = notes_folder(runs, notes), Path(catalog) if catalog else None
    sheets_dir = sheets_folder(runs, sheets)
    # The 404 page links from where the site is published: another --base-url is a change to build.
    signed = signer.fingerprint if signer else ""  # another signing key (or none) changes every bundle
    digest = (f"{inputs_digest(inputs.summary, notes_dir, sheets_dir, catalog_file, alternates)}|{base_path}|{signed}|{feed_base}"
              f"|{software()}")
    head = read_head(out / STATE_FILE)
    if head.get("inputs") == digest and (out / "index.html").is_file():
        return {"index": out / "index.html", "campaigns": head.get("count", 0), "rendered": [], "copied": 0, "processes": 1,
                "written": 0, "unchanged": 0, "problems": head.get("problems", []), "failed": head.get("failed", {})}
    return importlib.import_module(CHANGED).build(
        inputs=inputs, out=out, catalog=catalog, sheets_dir=sheets_dir, wanted=processes,
        places_of=(notes_dir, catalog_file, alternates, signer), digest=digest, signed=signed, base_path=base_path,
        feed_base=feed_base)


def describe_build(result: dict) -> str:
    """Say which campaigns were rendered, how many files were written, and where the index is."""
    rendered = result["rendered"]
    named = ", ".join(rendered[:10]) + (f" and {len(rendered) - 10} more" if len(rendered) > 10 else "")
    on = f" on {result['processes']} processes" if result["processes"] > 1 else ""
    # Said, so that nobody wonders whether a fast build looked at the records: a copy is of the same inputs' pages.
    store = _copied(result.get("copied", 0))
    lines = [f"{result['campaigns']} campaign(s); re-rendered: {named or 'none (unchanged)'}{store}{on}; "
             f"{result['written']} file(s) written, {result['unchanged']} unchanged"]
    lines += [f"campaign {name} was not built: {reason} (its page says so; run iteralab check)"
              for name, reason in result["failed"].items()]
    if result["problems"]:
        lines.append(f"{len(result['problems'])} problem(s) in the records and notes are listed on the index page "
                     "(iteralab check shows the records' ones)")
    for code, found in list(result.get("languages", {}).items())[1:]:
        lines.append(f"{language.LANGUAGES[code]}: {found['written']} file(s) written, {found['unchanged']} unchanged"
                     f"{_copied(found.get('copied', 0))}; {found['index'].resolve()}")
    for code in result.get("removed_languages", []):
        lines.append(f"{language.LANGUAGES[code]} ({code}/) removed: not asked for with --lang, its pages would have "
                     f"been left stale (build --lang {language.DEFAULT} --lang {code} builds both)")
    lines.append(f"Site: {result['index'].resolve()}")
    return "\n".join(lines)


def _copied(count: int) -> str:
    return f" ({count} copied from this machine's store of rendered campaigns)" if count else ""
