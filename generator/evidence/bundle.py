"""Evidence bundles: a zipped BagIt bag (RFC 8493) per campaign, deterministic, and their verification."""

from __future__ import annotations

import datetime as dt
import hashlib
import re
import stat
from pathlib import Path, PurePosixPath
from urllib.parse import quote

from markupsafe import Markup, escape

from iteralab.core import language
from iteralab.core.errors import CampaignFailed, UserError, within_campaign
from iteralab.core.files import write_atomically, writing
from iteralab.core.language import Text
from iteralab.core.paths import DEFAULT_RUNS, notes_folder
from iteralab.decision.report import decide
from iteralab.decision.text import describe_report, report_dict
from iteralab.evidence import signing
from iteralab.evidence.focus import focus_csv
from iteralab.money.catalog import load_catalog
from iteralab.pages.charts import spec_json
from iteralab.pages.figures import campaign_charts, decision_charts
from iteralab.pages.notes import load_notes
from iteralab.pages.questions import links
from iteralab.pages.render import fmt, jinja_environment, pretty_json
from iteralab.store import adaptation
from iteralab.store.questions import newest
from iteralab.store.reading import load
from iteralab.store.trials import trial_table, trials_csv
from iteralab.store.views import CampaignView, campaign_views

ZIP_EPOCH = dt.datetime(1980, 1, 1)  # every entry's time: the same evidence gives the same bytes


def _catalog_csv(catalog) -> str:
    lines = ["catalog_version,gpu,gpu_name,cards_per_lot,memory_per_card_gb,days,price_per_lot,currency"]
    for row in catalog.snapshot()["rows"]:
        lines.append(",".join(str(value) if value is not None else "" for value in (
            catalog.version, row["gpu"], row["gpu_name"], row["cards_per_lot"], row["memory_per_card_gb"],
            row["days"], row["price_per_lot"], row["currency"])))
    return "\n".join(lines) + "\n"


def bag_name(name: str) -> str:
    """Return NAME with control and line-break characters replaced: the bagit library splits manifests at U+2028 too."""
    # The receipt keeps its real name in the runs folder and in its rental record; only the copy in the bag is renamed.
    return "".join("_" if ord(char) < 32 or len(f"a{char}b".splitlines()) > 1 else char for char in name)


# Where a record keeps the files it names (the field, and the key of that file's sha256 in it): an adaptation's
# manifest names its training split's copy beside the corpus (the validation split).
NAMED_FILES = {"manifest": (("corpus", "file_sha256"), ("training_split", "file_sha256")),
               "trial": (("predictions", "sha256"),), "rental": (("receipt", "sha256"),),
               "expense": (("receipt", "sha256"),), "exclusion": (("document", "sha256"),)}
SHA256 = re.compile(r"^[0-9a-f]{64}$")
# Every file of a bag is UTF-8, as RFC 8493 asks of its tag files: str.encode() writes UTF-8 whatever the locale.


def references(named) -> list[tuple[str, str, str | None]]:
    """Return (place in the bag's data/, path in the runs folder, sha256) of every file the records NAMED name.

    The sha256 is None where a record names none (an older manifest's corpus copy): the file is carried all the same.
    """
    found = []
    for record, field, checksum in ((one, *where) for one in named for where in NAMED_FILES.get(one.get("kind"), ())):
        holder = record.get(field)
        if not isinstance(holder, dict) or not isinstance(holder.get("path"), str):
            continue
        digest, name = (holder[checksum] if SHA256.match(str(holder.get(checksum))) else None), PurePosixPath(holder["path"]).name
        if record["kind"] == "manifest":
            place = f"inputs/{bag_name(name)}"
        elif record["kind"] == "trial":
            place = f"predictions/{name}"
        elif digest is None:
            continue  # a receipt or a document is filed under its sha256: without one it has no place
        else:
            place = f"{'documents' if record['kind'] == 'exclusion' else 'receipts'}/{digest[:16]}/{bag_name(name)}"
        found.append((place, holder["path"], digest))
    return found + [entry for record in named if record.get("kind") == "trial" for entry in _serving_files(record)]


def _serving_files(trial: dict) -> list[tuple[str, str, str | None]]:
    """Return a serving trial's engine log and the load generator's own files (#64), as references() returns a file."""
    kept = (trial.get("serving") or {}).get("files") if isinstance(trial.get("serving"), dict) else None
    if not isinstance(kept, dict):
        return []
    files = [kept.get("engine_log"), *(kept.get("load_generator") if isinstance(kept.get("load_generator"), list) else ())]
    return [(f"serving/{trial['record_id']}/{PurePosixPath(entry['path']).name}", entry["path"],
             entry.get("sha256") if SHA256.match(str(entry.get("sha256"))) else None)
            for entry in files if isinstance(entry, dict) and isinstance(entry.get("path"), str)]


def payload(view: CampaignView, runs: Path, notes_dir: Path | None, catalog_path: Path | None, *,
            loaded_notes: list | None = None, price_catalog=None, table_csv: str | None = None, report=None,
            digests: dict[str, str] | None = None, charts: list[dict] | None = None, revision: dict | None = None) -> dict[str, bytes]:
    """Collect the files of a campaign's evidence, keyed by their path inside data/.

    A site build passes what it already has (LOADED_NOTES, PRICE_CATALOG, TABLE_CSV, REPORT, CHARTS) instead of making it
    again per campaign. DIGESTS, when given, receives the sha256 of every file but index.html (the bag's manifest reuses
    them).
    """
    files: dict[str, bytes] = {}
    folder = runs / view.name
    for path in sorted((folder / "records").glob("*.jsonl")):
        files[f"records/{path.name}"] = path.read_bytes()
    for manifest in view.manifests:
        files[f"manifests/{manifest['record_id']}.json"] = _json(manifest)
        for place, relative, _ in references([manifest]):  # its corpus copy (and training split), beside it
            if place not in files and (runs / relative).is_file():
                files[place] = (runs / relative).read_bytes()
    if view.manifests:
        latest = view.manifests[-1]
        files["protocol.json"] = _json({"protocol_fingerprints": view.fingerprints, "protocol": latest["protocol"]})
        files["corpus-fingerprint.json"] = _json({m["record_id"]: m["corpus"] for m in view.manifests})
    configurations = {t["record_id"]: summary.label for summary in view.variants for t in summary.trials}
    files["verdicts.json"] = _json({t["record_id"]: {"variant": t["variant"], "configuration": configurations[t["record_id"]],
                                                     "status": t["status"],
                                                     "corpus_accepted": t["corpus_accepted"], "id_check": t.get("id_check"),
                                                     "excluded_by": view.excluded.get(t["record_id"]),
                                                     "verdicts": (t.get("quality") or {}).get("verdicts")} for t in view.trials})
    files.update(_models(view))
    files["trials.csv"] = (trials_csv(trial_table(view)) if table_csv is None else table_csv).encode()
    price_catalog = price_catalog or load_catalog(catalog_path)
    files["catalog.csv"] = _catalog_csv(price_catalog).encode()
    report = report or decide(view, price_catalog)
    files["decision.json"] = _json(report_dict(report))
    files["decision.txt"] = (describe_report(report) + "\n").encode()
    files["costs.focus.csv"] = focus_csv(view, report).encode()
    if revision and revision.get("before"):  # the revision this one asks again, tied by its manifest's hash (#35)
        files["question.json"] = _json({"question": revision["question"], "asks_again": revision["before"],
                                        "asked_manifest": revision["before_manifest"],
                                        "asked_manifest_file": f"data/manifests/{revision['before_manifest']['record_id']}.json"
                                                               f" in {revision['before']}'s evidence bundle"})
    # Each chart as a Vega-Lite spec with its data: any Vega-Lite tool draws it again, without this site.
    for chart in charts if charts is not None else campaign_charts(view) + decision_charts(report):
        files[f"charts/{chart['id']}.vl.json"] = spec_json(chart["spec"])
    # Every file a record names (predictions, receipts of rentals and expenses, exclusions' documents), voided records'
    # too: the bundle carries its records whole, and verify fails on a file one of them names that the bag lacks.
    named = (*view.manifests, *view.trials, *view.rentals, *view.expenses, *view.voided, *view.exclusions)
    for place, relative, _ in sorted(set(references(named))):
        if place not in files and (runs / relative).is_file():
            files[place] = (runs / relative).read_bytes()
    for note in loaded_notes if loaded_notes is not None else load_notes(notes_dir):
        if note.meta.get("campaign") == view.name:
            files[f"notes/{bag_name(note.source)}"] = (Path(notes_dir) / note.source).read_bytes()
    files["index.html"] = _index_html(view, files, report, {} if digests is None else digests).encode()
    return files


def _models(view: CampaignView) -> dict[str, bytes]:
    """Return an adaptation campaign's models/exports.json (every successful trial's export: its files with their bytes
    and sha256, and each configuration's validated model) and models/README.txt saying why the weights are not here;
    nothing for a campaign whose trials carry no adaptation object."""
    if not adaptation.has_block(view.trials):
        return {}
    exports = {"exports": adaptation.exports(view.trials),
               "validated_models": {summary.label: adaptation.validated_model(summary.counted) for summary in view.variants},
               "weights_in_this_bundle": False}
    readme = Text("The exported models (the fine-tuned weights, or the LoRA adapter alone) are not in this bundle: they are "
                  "kept beside the runs folder, under the path each export names (CAMPAIGN/models/TRIAL_ID). exports.json "
                  "lists every successful trial's export with each file's bytes and sha256, and the sha256 over them (the "
                  "sha256sum lines of its files, sorted by name), so an archivist can check a model kept apart against "
                  "these records: sha256sum its files and compare. validated_models names, per configuration, the model "
                  "that counts in the decision: one at most, whatever its repetitions.")
    return {"models/exports.json": _json(language.said(exports)), "models/README.txt": (readme.say() + "\n").encode()}


def _file_rows(listing: list[dict]) -> Markup:
    """Return the index's row of every file: a link, its size and sha256 (written here, not in a Jinja loop: 120 a bundle)."""
    return Markup("".join(f'<tr><td><a href="{quote(file["path"])}">{escape(file["path"])}</a></td>'
                          f'<td class="num">{fmt(file["size"], "int")}</td><td><code>{file["sha256"]}</code></td></tr>'
                          for file in listing))


def _json(value) -> bytes:
    return (pretty_json(value) + "\n").encode()


def _index_html(view: CampaignView, files: dict[str, bytes], report, digests: dict[str, str]) -> str:
    """Render the bundle's own page; DIGESTS gets each listed file's sha256, which the bag's manifest lists again."""
    digests.update((name, hashlib.sha256(data).hexdigest()) for name, data in files.items() if name not in digests)
    listing = [{"path": name, "size": len(data), "sha256": digests[name]} for name, data in sorted(files.items())]
    return jinja_environment().get_template("bundle_index.html").render(view=view, file_rows=_file_rows(listing),
                                                                         cost=view.cost(), report=report)


def bag_files(name: str, data: dict[str, bytes], bagging_date: str, digests: dict[str, str] | None = None, *,
              group: str | None = None, kinds: tuple = ()) -> dict[str, bytes]:
    """Lay out a BagIt 1.0 bag: payload under data/, sha256 manifests, bag-info with Payload-Oxum.

    NAME: the bag's External-Identifier; GROUP: its Bag-Group-Identifier, the set of bags it belongs to (RFC 8493
    2.2.2). DIGESTS: the sha256 of payload files already hashed, by their path inside data/. KINDS: the campaign's kinds
    of work (CampaignView.kinds), each a Kind-Of-Work line of bag-info (a label of its own, which RFC 8493 2.2.2 allows;
    several only where the manifests disagree).
    """
    known = digests or {}
    bag = {f"data/{path}": content for path, content in data.items()}
    manifest = "".join(f"{known.get(path) or hashlib.sha256(data[path]).hexdigest()}  data/{path}\n" for path in sorted(data))
    grouped = f"Bag-Group-Identifier: {group}\n" if group else ""
    grouped += "".join(f"Kind-Of-Work: {bag_name(kind)}\n" for kind in kinds)  # a record's line break breaks no line
    info = (f"Bag-Software-Agent: iteralab\nBagging-Date: {bagging_date}\n{grouped}External-Identifier: {name}\n"
            f"Payload-Oxum: {sum(len(c) for c in bag.values())}.{len(bag)}\n")
    tags = {"bagit.txt": b"BagIt-Version: 1.0\nTag-File-Character-Encoding: UTF-8\n",
            "bag-info.txt": info.encode(), "manifest-sha256.txt": manifest.encode()}
    tags["tagmanifest-sha256.txt"] = "".join(
        f"{hashlib.sha256(content).hexdigest()}  {path}\n" for path, content in sorted(tags.items())).encode()
    return {**bag, **tags}


def zip_bytes(top: str, files: dict[str, bytes]) -> bytes:
    """Zip FILES under TOP/ with sorted entries, fixed times and permissions.

    Written by stream-zip, deflated by zlib-ng at level 2: deflating the prediction files is a quarter of a cold build,
    and on the demo's bundle zlib-ng's level 2 took 12.1 ms against zipfile's zlib level 1's 13.7 ms, for 8 % fewer
    bytes (its level 1 took 7.9 ms but made bundles a third larger, which the machine's store of rendered campaigns
    then held fewer of). Python's zipfile takes no other compressor. The same evidence gives the same bytes with the
    same zlib-ng.
    """
    from stream_zip import ZIP_32, stream_zip

    members = ((f"{top}/{path}", ZIP_EPOCH, stat.S_IFREG | 0o644, ZIP_32, (files[path],)) for path in sorted(files))
    deflated: dict[bytes, bytes] = {}  # this bundle's files deflated so far, by their content
    return b"".join(stream_zip(members, get_compressobj=lambda: _Deflate(deflated), extended_timestamps=False))


class _Deflate:
    """Deflate one zip entry, once per distinct content in a bundle.

    The repetitions of a variant write byte-identical prediction files (the same model on the same corpus: the demo's 25
    files hold 5 contents), and deflating them was most of a bundle's time. The same content deflates to the same bytes,
    so the bundle's bytes are those of deflating every entry.
    """

    def __init__(self, deflated: dict[bytes, bytes]):
        self.deflated, self.chunks = deflated, []

    def compress(self, chunk: bytes) -> bytes:
        self.chunks.append(chunk)
        return b""  # all of it at flush: a compressor may hold its output back

    def flush(self) -> bytes:
        from zlib_ng import zlib_ng

        data = self.chunks[0] if len(self.chunks) == 1 else b"".join(self.chunks)
        if data not in self.deflated:
            deflate = zlib_ng.compressobj(2, zlib_ng.DEFLATED, -zlib_ng.MAX_WBITS)
            self.deflated[data] = deflate.compress(data) + deflate.flush()
        return self.deflated[data]


def identifier(campaign: str, code: str | None = None) -> str:
    """Return the External-Identifier of CAMPAIGN's bag in language CODE (the current one by default)."""
    return f"{campaign}-evidence-{code or language.current()}"


def campaign_bundle(view: CampaignView, *, runs: Path, notes: Path | None = None, catalog: Path | None = None,
                    loaded_notes: list | None = None, price_catalog=None, table_csv: str | None = None, report=None,
                    charts: list[dict] | None = None, signer: signing.Signer | None = None, revision: dict | None = None) -> bytes:
    """Return the deterministic zip of one campaign's evidence bag, its tag manifest signed with SIGNER when given.

    A signed bag is the unsigned one plus its signatures/ folder: the same key and bag give the same bytes.
    """
    top = f"{view.name}-evidence"
    bagging_date = (view.last_at if view.manifests or view.trials else "1980-01-01")[:10]
    digests: dict[str, str] = {}
    files = payload(view, Path(runs), notes, catalog, loaded_notes=loaded_notes, price_catalog=price_catalog,
                    table_csv=table_csv, report=report, digests=digests, charts=charts, revision=revision)
    # The same campaign's bag in each language of the site differs (its pages, chart specs, decision.txt): each has
    # an identifier of its own naming its language, and both name the campaign's evidence as their group (#48).
    bag = bag_files(identifier(view.name), files, bagging_date, digests, group=top, kinds=view.kinds)
    if signer is not None:
        bag.update(signing.signature_files(bag["tagmanifest-sha256.txt"], signer))
    return zip_bytes(top, bag)


def write_bundle(*, campaign: str, out: Path | str, runs: Path | str = DEFAULT_RUNS, notes: Path | str | None = None,
                 catalog: Path | str | None = None, sign_key: Path | str | None = None,
                 quiet: bool = False) -> tuple[Path, str]:
    """Write CAMPAIGN's evidence bundle to OUT, signed with SIGN_KEY when given; return the path and its sha256."""
    signer = signing.signer(sign_key, quiet=quiet) if sign_key else None  # a key that cannot sign stops before any work
    runs = Path(runs)
    views = {view.name: view for view in campaign_views(load(runs))}
    if campaign not in views:
        raise UserError(f"campaign {campaign} has no records in {runs}; campaigns there: {', '.join(sorted(views)) or 'none'}")
    view = views[campaign]
    if view.failure:
        raise CampaignFailed(campaign, view.failure)
    # The revision it asks again, as a site build names it (#35): the same bundle from the command line and the site.
    revision = links({name: newest(found.manifests) for name, found in views.items() if found.manifests}).get(campaign)
    with within_campaign(campaign):
        data = campaign_bundle(view, runs=runs, notes=notes_folder(runs, notes), catalog=catalog, signer=signer,
                               revision=revision)
    out = Path(out)
    with writing(out, "the evidence bundle"):
        write_atomically(out, data)  # an existing bundle is replaced whole, or kept when the disk is full
    return out, hashlib.sha256(data).hexdigest()
