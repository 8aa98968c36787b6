"""Check an evidence bundle: safe entries, every file present and matching its sha256, nothing extra, every file its
records name carried, and its signature when it has one."""

from __future__ import annotations

import hashlib
import json
import re
import stat
import tempfile
import zipfile
from pathlib import Path, PurePosixPath

from iteralab.core.errors import UserError
from iteralab.evidence import signing
from iteralab.evidence.bundle import references
from iteralab.store import adaptation
from iteralab.store.columns import parse_line


def _unsafe(info: zipfile.ZipInfo) -> str | None:
    name = info.filename
    path = PurePosixPath(name)
    if name.startswith("/") or "\\" in name or (len(name) > 1 and name[1] == ":"):
        return "absolute path"
    if ".." in path.parts:
        return "path with '..'"
    mode = info.external_attr >> 16
    if stat.S_ISLNK(mode):
        return "symbolic link"
    # Zips from other tools often carry no file-type bits at all; only a stated other type is refused.
    if stat.S_IFMT(mode) and not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
        return "not a regular file"
    return None


def verify_bundle(path: Path | str, *, allowed_signers: Path | str | None = None, require_signature: bool = False) -> list[str]:
    """Check a bundle's safety, completeness, every checksum and its signature; return the problems (empty when sound)."""
    return verify_report(path, allowed_signers=allowed_signers, require_signature=require_signature)["problems"]


def verify_report(path: Path | str, *, allowed_signers: Path | str | None = None, require_signature: bool = False) -> dict:
    """Check a bundle as verify_bundle does; return its problems, who signed it (None: unsigned) and when it was built."""
    path = Path(path)
    report: dict = {"problems": [], "signature": None, "built": None}
    try:
        archive = zipfile.ZipFile(path)
    except FileNotFoundError:
        raise UserError(f"{path} does not exist") from None
    except zipfile.BadZipFile:
        raise UserError(f"{path} is not a zip file") from None
    except OSError as error:  # a folder, or no permission to read it
        raise UserError(f"cannot read {path}: {error.strerror or error}") from None
    with archive, tempfile.TemporaryDirectory(prefix="iteralab-verify-") as temporary:
        infos = archive.infolist()
        refused = [f"{info.filename}: refused ({why}); nothing was extracted" for info in infos if (why := _unsafe(info))]
        tops = {PurePosixPath(info.filename).parts[0] for info in infos}
        if refused or len(tops) != 1:
            report["problems"] = refused or [f"the bundle must hold one top folder, it holds {len(tops)}: {', '.join(sorted(tops))}"]
            return report
        root = Path(temporary)
        try:
            report["problems"] = _extract(archive, infos, root)
        except OSError as error:
            raise UserError(f"could not unpack {path} into a temporary folder to check it ({temporary}): "
                            f"{error.strerror or error}; free space there or set TMPDIR to another folder, and run again") from None
        bag_dir = root / tops.pop()
        report["problems"] = report["problems"] or _check_bag(bag_dir)
        report["built"] = _bagging_date(bag_dir)
        if not report["problems"]:
            report["signature"], problem = _check_signature(bag_dir, allowed_signers, require_signature)
            report["problems"] = [problem] if problem else []
    return report


def describe(path, report: dict) -> str:
    """Say what verify found: the problems, or that the bundle is whole, who signed it and when it was built."""
    if report["problems"]:
        return "\n".join(report["problems"])
    signed = report["signature"]
    if signed is None:
        who = "not signed (its checksums prove that it is whole, not who made it)"
    elif signed["checked"]:
        who = f"signed by {signed['principal']} with the key {signed['fingerprint']} (checked against the allowed signers)"
    else:
        who = f"signed by {signed['fingerprint']} (not checked against a list of signers: pass --allowed-signers FILE)"
    return f"{path}: valid (every file present and matching its sha256); {who}; built {report['built']}"


def _check_bag(bag_dir: Path) -> list[str]:
    """Check the unpacked bag: its manifests, BagIt's own validation, and the files its records name."""
    import bagit

    problems = _check_manifests(bag_dir)
    if problems:
        return problems
    try:
        bagit.Bag(str(bag_dir)).validate()
    except bagit.BagValidationError as error:
        return [_describe(detail) for detail in error.details] or [str(error)]
    except bagit.BagError as error:
        return [f"not a valid BagIt bag: {error}"]
    return _check_references(bag_dir, bag_dir.name.removesuffix("-evidence"))


def _bagging_date(bag_dir: Path) -> str | None:
    info = bag_dir / "bag-info.txt"
    lines = info.read_bytes().decode("utf-8", "replace").split("\n") if info.is_file() else []
    return next((line.partition(":")[2].strip() for line in lines if line.startswith("Bagging-Date:")), None)


def _check_signature(bag_dir: Path, allowed_signers, require_signature: bool) -> tuple[dict | None, str | None]:
    """Check the bag's signature of its tag manifest, if it has one; refuse an unsigned bag when one is required."""
    signature = bag_dir / signing.SIGNATURE
    if not signature.is_file():
        if require_signature:
            return None, (f"{signing.SIGNATURE}: missing; the bundle is not signed and --require-signature refuses it "
                          "(its publisher signs it with iteralab bundle --sign-key KEY or iteralab build --sign-key KEY)")
        return None, None
    return signing.check((bag_dir / "tagmanifest-sha256.txt").read_bytes(), signature.read_bytes(),
                         None if allowed_signers is None else Path(allowed_signers))


def _check_references(bag_dir: Path, campaign: str) -> list[str]:
    """Name every file a bundled record of CAMPAIGN names that the bag lacks, or carries with other bytes."""
    bagged: dict[str, tuple[dict, str]] = {}  # the first record of each id, as the loader keeps it
    for path in sorted((bag_dir / "data" / "records").glob("*.jsonl")):
        for number, raw in enumerate(path.read_bytes().split(b"\n"), start=1):
            record, _ = parse_line(raw) if raw.strip() else (None, None)
            if record is not None and record["campaign"] == campaign:
                bagged.setdefault(record["record_id"], (record, f"data/records/{path.name}:{number}"))
    problems = []
    for record, where in bagged.values():
        for place, relative, sha256 in references([record]):
            carried = bag_dir / "data" / place
            if not carried.is_file():
                problems.append(f"data/{place}: missing; {where} ({record['kind']} {record['record_id']}) names {relative}, "
                                "which the bundle must carry: bundle it again from a runs folder that holds it")
            elif sha256 is not None and hashlib.sha256(carried.read_bytes()).hexdigest() != sha256:
                problems.append(f"data/{place}: its sha256 differs from the one {where} ({record['kind']} "
                                f"{record['record_id']}) records for {relative}")
    return problems + _check_exports(bag_dir, [record for record, _ in bagged.values() if record["kind"] == "trial"])


def _check_exports(bag_dir: Path, trials: list[dict]) -> list[str]:
    """Name each export of an adaptation trial that models/exports.json lacks or lists otherwise than its record: the
    list an archivist checks the models kept apart against (the weights are not in the bundle)."""
    expected = {export["trial_id"]: export for export in adaptation.exports(trials)}
    if not expected:
        return []
    listed = bag_dir / "data" / "models" / "exports.json"
    if not listed.is_file():
        return ["data/models/exports.json: missing; the bundle's records hold adaptation trials whose exported models it "
                "must list with their hashes: bundle it again"]
    try:
        found = {export["trial_id"]: export for export in json.loads(listed.read_bytes())["exports"]}
    except (ValueError, KeyError, TypeError):
        return ["data/models/exports.json: not the list of exports iteralab writes"]
    return [f"data/models/exports.json: the export of trial {trial_id} differs from its record's (adaptation.export)"
            for trial_id in sorted(expected.keys() | found.keys()) if expected.get(trial_id) != found.get(trial_id)]


def _extract(archive: zipfile.ZipFile, infos: list, root: Path) -> list[str]:
    """Unpack the entries under ROOT; return a refusal for one that would land outside it (nothing after it is unpacked)."""
    for info in infos:
        target = root / info.filename
        if not target.resolve().is_relative_to(root.resolve()):
            return [f"{info.filename}: refused (would land outside the temporary folder)"]
        if info.is_dir():
            target.mkdir(parents=True, exist_ok=True)
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        with archive.open(info) as source, open(target, "wb") as sink:
            sink.write(source.read())
    return []


def _check_manifests(bag_dir: Path) -> list[str]:
    """Name each payload or tag file that is missing, altered or not listed (bagit stops at the first count)."""
    problems = []
    for manifest_name, scope in (("manifest-sha256.txt", "data"), ("tagmanifest-sha256.txt", None)):
        manifest = bag_dir / manifest_name
        if not manifest.is_file():
            problems.append(f"{manifest_name}: missing; this is not an iteralab evidence bag")
            continue
        listed = {}
        # BagIt (RFC 8493) ends lines with LF, CR or CRLF, and nothing else: a file name may hold U+2028 or U+0085.
        text = manifest.read_bytes().decode("utf-8")
        for number, line in enumerate(re.split(r"\r\n|\r|\n", text.removesuffix("\n").removesuffix("\r")), start=1):
            digest, _, name = line.partition("  ")
            if not name:
                problems.append(f"{manifest_name}:{number}: not 'sha256  path'")
                continue
            listed[name] = digest
        for name, digest in sorted(listed.items()):
            path = bag_dir / name
            if not path.is_file():
                problems.append(f"{name}: missing (listed in {manifest_name})")
            elif hashlib.sha256(path.read_bytes()).hexdigest() != digest:
                problems.append(f"{name}: altered (its sha256 differs from {manifest_name})")
        if scope:
            present = {p.relative_to(bag_dir).as_posix() for p in (bag_dir / scope).rglob("*") if p.is_file()}
            problems.extend(f"{name}: unexpected (not in {manifest_name})" for name in sorted(present - set(listed)))
    return problems


def _describe(detail) -> str:
    import bagit

    if isinstance(detail, bagit.ChecksumMismatch):
        return f"{detail.path}: altered ({detail.algorithm} is {detail.found}, the manifest says {detail.expected})"
    if isinstance(detail, bagit.FileMissing):
        return f"{detail.path}: missing (listed in the manifest)"
    if isinstance(detail, bagit.UnexpectedFile):
        return f"{detail.path}: unexpected (not in the manifest)"
    return str(detail)
