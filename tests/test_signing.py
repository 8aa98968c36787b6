"""Signed evidence bundles (#36): an OpenSSH signature of the tag manifest, checked by iteralab and by ssh-keygen alone."""

from __future__ import annotations

import stat
import subprocess
import zipfile
from pathlib import Path

import pytest
from bs4 import BeautifulSoup

from iteralab.evidence import signing
from iteralab.site.build import build_site
from iteralab.store import records
from tests import factory

TOP = "camp-evidence"


def _key(folder: Path, name: str = "id_ed25519", *, comment: str = "archivist@example.org", passphrase: str = "") -> Path:
    """Make a fresh Ed25519 key pair with ssh-keygen; return the private key's path."""
    folder.mkdir(parents=True, exist_ok=True)
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", passphrase, "-C", comment, "-f", str(folder / name)], check=True)
    return folder / name


def _allowed(path: Path, *keys: tuple[str, Path]) -> Path:
    """Write an OpenSSH allowed signers file: one 'NAME KEY' line per (name, private key)."""
    lines = [f"{name} {' '.join(Path(f'{key}.pub').read_text().split()[:2])}\n" for name, key in keys]
    path.write_text("".join(lines))
    return path


@pytest.fixture
def runs(tmp_path):
    runs = tmp_path / "runs"
    manifest = factory.with_corpus_file(runs, factory.manifest())
    records.append(runs, manifest)
    for repetition in range(1, 4):
        trial = factory.trial(manifest, "b1", seconds=1 + repetition / 10, repetition=repetition, sequence=repetition)
        records.append(runs, factory.with_prediction_file(runs, trial))
    return runs


def _entries(path: Path) -> dict[str, bytes]:
    with zipfile.ZipFile(path) as archive:
        return {info.filename: archive.read(info) for info in archive.infolist()}


def _rezip(source: Path, target: Path, change) -> Path:
    """Copy a bundle, passing each entry's name and bytes through CHANGE, which returns the bytes to write."""
    with zipfile.ZipFile(source) as old, zipfile.ZipFile(target, "w") as new:
        for info in old.infolist():
            new.writestr(info.filename, change(info.filename, old.read(info)))
    return target


def test_a_signed_bundle_is_checked_by_iteralab_and_by_plain_ssh_keygen(tmp_path, runs, cli):
    key = _key(tmp_path / "keys")
    allowed = _allowed(tmp_path / "allowed_signers", ("archivist@example.org", key))
    code, out, err = cli("bundle", "camp", "--runs", runs, "-o", tmp_path / "signed.zip", "--sign-key", key)
    assert code == 0, err
    fingerprint = subprocess.run(["ssh-keygen", "-l", "-f", str(key)], capture_output=True, text=True, check=True).stdout.split()[1]
    code, out, err = cli("verify", tmp_path / "signed.zip", "--allowed-signers", allowed)
    assert code == 0, out + err
    assert f"signed by archivist@example.org with the key {fingerprint} (checked against the allowed signers)" in out
    assert "valid (every file present and matching its sha256)" in out and "built 2026-" in out
    code, out, _ = cli("verify", tmp_path / "signed.zip")
    assert code == 0 and f"signed by {fingerprint} (not checked against a list of signers" in out
    # A reviewer without iteralab: unzip, then the two commands signatures/README.txt gives.
    with zipfile.ZipFile(tmp_path / "signed.zip") as archive:
        archive.extractall(tmp_path / "unpacked")
    bag = tmp_path / "unpacked" / TOP
    readme = (bag / "signatures" / "README.txt").read_text()
    assert fingerprint in readme and "ssh-keygen -Y verify -f ALLOWED -I NAME -n iteralab-evidence" in readme
    with open(bag / "tagmanifest-sha256.txt", "rb") as tag_manifest:
        checked = subprocess.run(["ssh-keygen", "-Y", "verify", "-f", str(allowed), "-I", "archivist@example.org",
                                  "-n", "iteralab-evidence", "-s", "signatures/tagmanifest-sha256.txt.sig"],
                                 stdin=tag_manifest, cwd=bag, capture_output=True, text=True)
    assert checked.returncode == 0 and "Good \"iteralab-evidence\" signature for archivist@example.org" in checked.stdout
    for manifest in ("tagmanifest-sha256.txt", "manifest-sha256.txt"):
        assert subprocess.run(["sha256sum", "--quiet", "-c", manifest], cwd=bag).returncode == 0


def test_signing_adds_only_the_signature_files_and_gives_the_same_bytes_again(tmp_path, runs, cli):
    key = _key(tmp_path / "keys")
    for name, extra in (("plain.zip", ()), ("one.zip", ("--sign-key", key)), ("two.zip", ("--sign-key", key))):
        assert cli("bundle", "camp", "--runs", runs, "-o", tmp_path / name, *extra)[0] == 0
    assert (tmp_path / "one.zip").read_bytes() == (tmp_path / "two.zip").read_bytes()  # Ed25519 is deterministic
    plain, signed = _entries(tmp_path / "plain.zip"), _entries(tmp_path / "one.zip")
    assert {name: data for name, data in signed.items() if "/signatures/" not in name} == plain
    assert sorted(set(signed) - set(plain)) == [f"{TOP}/{signing.README}", f"{TOP}/{signing.SIGNATURE}"]


def test_each_refusal_names_what_is_wrong(tmp_path, runs, cli):
    key, stranger = _key(tmp_path / "keys"), _key(tmp_path / "other", comment="someone@example.org")
    allowed = _allowed(tmp_path / "allowed_signers", ("archivist@example.org", key))
    assert cli("bundle", "camp", "--runs", runs, "-o", tmp_path / "plain.zip")[0] == 0
    assert cli("bundle", "camp", "--runs", runs, "-o", tmp_path / "signed.zip", "--sign-key", key)[0] == 0
    assert cli("bundle", "camp", "--runs", runs, "-o", tmp_path / "stranger.zip", "--sign-key", stranger)[0] == 0
    code, out, _ = cli("verify", tmp_path / "plain.zip", "--require-signature")
    assert code == 1 and "not signed and --require-signature refuses it" in out
    code, out, _ = cli("verify", tmp_path / "plain.zip")
    assert code == 0 and "not signed (its checksums prove that it is whole, not who made it)" in out
    code, out, _ = cli("verify", tmp_path / "stranger.zip", "--allowed-signers", allowed)
    assert code == 1 and f"a key that {allowed} does not list" in out
    # A signature that no longer matches the tag manifest: that of other bytes, by the same key.
    other = signing.sign(b"another tag manifest\n", signing.signer(key))
    _rezip(tmp_path / "signed.zip", tmp_path / "swapped.zip",
           lambda name, data: other if name.endswith(".sig") else data)
    code, out, _ = cli("verify", tmp_path / "swapped.zip", "--allowed-signers", allowed)
    assert code == 1 and "does not match tagmanifest-sha256.txt" in out
    # The right bytes signed for another namespace (a git commit's signature, say).
    with zipfile.ZipFile(tmp_path / "signed.zip") as archive:
        tag_manifest = archive.read(f"{TOP}/tagmanifest-sha256.txt")
    git = subprocess.run(["ssh-keygen", "-Y", "sign", "-f", str(key), "-n", "git"], input=tag_manifest, capture_output=True,
                         check=True).stdout
    _rezip(tmp_path / "signed.zip", tmp_path / "git.zip", lambda name, data: git if name.endswith(".sig") else data)
    code, out, _ = cli("verify", tmp_path / "git.zip", "--allowed-signers", allowed)
    assert code == 1 and "made for the namespace 'git', not 'iteralab-evidence'" in out
    code, _, err = cli("verify", tmp_path / "signed.zip", "--allowed-signers", tmp_path / "nowhere")
    assert code != 0 and "--allowed-signers" in err and "no such file" in err and "Traceback" not in err


@pytest.mark.parametrize(("entry", "mode", "why"), [
    (f"{TOP}/signatures/../../tagmanifest-sha256.txt.sig", stat.S_IFREG | 0o644, "path with '..'"),
    ("/signatures/tagmanifest-sha256.txt.sig", stat.S_IFREG | 0o644, "absolute path"),
    (f"{TOP}/{signing.SIGNATURE}", stat.S_IFLNK | 0o777, "symbolic link"),
])
def test_a_signature_entry_that_is_a_link_absolute_or_climbing_is_refused(tmp_path, runs, cli, entry, mode, why):
    assert cli("bundle", "camp", "--runs", runs, "-o", tmp_path / "plain.zip")[0] == 0
    with zipfile.ZipFile(tmp_path / "plain.zip", "a") as archive:
        info = zipfile.ZipInfo(entry)
        info.external_attr = mode << 16
        archive.writestr(info, b"/etc/passwd")
    code, out, _ = cli("verify", tmp_path / "plain.zip", "--allowed-signers", tmp_path / "unused")
    assert code == 1 and f"refused ({why}); nothing was extracted" in out


def test_a_key_that_cannot_sign_is_one_line_and_nothing_is_written(tmp_path, runs, cli, monkeypatch):
    locked = _key(tmp_path / "keys", passphrase="correct horse")
    cases = [((tmp_path / "no-such-key",), "no such file"),
             ((locked, "--quiet"), "has a passphrase, and --quiet asks for none: load it into ssh-agent")]
    for arguments, said in cases:
        code, _, err = cli("bundle", "camp", "--runs", runs, "-o", tmp_path / "b.zip", "--sign-key", *arguments)
        assert code != 0 and said in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
        assert not (tmp_path / "b.zip").exists()
        code, _, err = cli("build", "--runs", runs, "--out", tmp_path / "site", "--sign-key", *arguments)
        assert code != 0 and said in err and not (tmp_path / "site").exists(), err
    # A build signs every bundle: a key with a passphrase would be asked for each time, so it is refused without --quiet.
    code, _, err = cli("build", "--runs", runs, "--out", tmp_path / "site", "--sign-key", locked)
    assert code != 0 and "a build signs every campaign's bundle" in err and "ssh-add" in err and not (tmp_path / "site").exists()
    # No ssh-keygen on the PATH: the same one line saying what to install.
    empty = tmp_path / "bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    code, _, err = cli("bundle", "camp", "--runs", runs, "-o", tmp_path / "b.zip", "--sign-key", locked)
    assert code != 0 and "OpenSSH's ssh-keygen, which is not installed here" in err and not (tmp_path / "b.zip").exists()


def test_a_site_built_with_a_key_signs_each_bundle_and_says_so(tmp_path, runs):
    from iteralab.evidence.verification import verify_report

    key = _key(tmp_path / "keys")
    signer = signing.signer(key)
    out = tmp_path / "site"
    build_site(runs=runs, out=out, sign_key=key, languages=("en", "id"))
    for folder in ("", "id"):
        page = BeautifulSoup((out / folder / "campaigns" / "camp" / "index.html").read_text(encoding="utf-8"), "html.parser")
        assert signer.fingerprint in page.select_one("#bundle-signature").get_text()
        report = verify_report(out / folder / "campaigns" / "camp" / "evidence-camp.zip")
        assert report["problems"] == [] and report["signature"]["fingerprint"] == signer.fingerprint
    # Built again without the key: every bundle is unsigned again, and the page says so (a change the build sees).
    result = build_site(runs=runs, out=out)
    assert result["rendered"] == ["camp"]
    assert verify_report(out / "campaigns" / "camp" / "evidence-camp.zip")["signature"] is None
    page = BeautifulSoup((out / "campaigns" / "camp" / "index.html").read_text(encoding="utf-8"), "html.parser")
    assert page.select_one("#bundle-signature").get_text().startswith("Not signed")
