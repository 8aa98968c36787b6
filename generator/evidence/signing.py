"""Sign an evidence bag's tag manifest with an OpenSSH key, and check such a signature: ssh-keygen -Y, nothing else.

The tag manifest lists the sha256 of manifest-sha256.txt and bag-info.txt, and manifest-sha256.txt that of every file
under data/: one signature covers the whole bag (as harvard-lil's bag-nabit signs it). The signature is an OpenSSH
SSHSIG (the format git uses for signed commits), so a reviewer checks it with stock OpenSSH.
"""

from __future__ import annotations

import base64
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from iteralab.core.errors import UserError

NAMESPACE = "iteralab-evidence"
SIGNATURE = "signatures/tagmanifest-sha256.txt.sig"
README = "signatures/README.txt"


@dataclass(frozen=True)
class Signer:
    """A key to sign with: its file (private, or public with the private half in ssh-agent) and its fingerprint."""

    key: Path
    fingerprint: str  # 'SHA256:…', as ssh-keygen -l prints it
    kind: str  # 'ED25519', 'RSA', …
    quiet: bool = False  # never ask for a passphrase


def _ssh_keygen() -> str:
    found = shutil.which("ssh-keygen")
    if found is None:
        raise UserError("signing and checking signatures need OpenSSH's ssh-keygen, which is not installed here: install "
                        "it (Debian: apt-get install openssh-client) and run again; nothing was written")
    return found


def _run(arguments: list[str], data: bytes = b"", *, quiet: bool = True) -> subprocess.CompletedProcess:
    # quiet: a new session has no terminal, so ssh-keygen cannot stop to ask for a passphrase; it fails instead.
    return subprocess.run([_ssh_keygen(), *arguments], input=data, capture_output=True, check=False, start_new_session=quiet,
                          env={**os.environ, "SSH_ASKPASS_REQUIRE": "never"} if quiet else None)


def _said(result: subprocess.CompletedProcess) -> str:
    lines = [line for line in result.stderr.decode("utf-8", "replace").splitlines() if line.strip()]
    return lines[-1].strip() if lines else f"exit status {result.returncode}"


def signer(key: Path | str, *, quiet: bool = False, many: bool = False) -> Signer:
    """Check a signing key before anything is written: it exists, ssh-keygen reads it, and (QUIET, or MANY bundles to
    sign, as a site build has) it needs no passphrase."""
    key = Path(key).expanduser()
    if not key.is_file():
        raise UserError(f"--sign-key {key}: no such file; give the private key to sign with (for example "
                        "~/.ssh/id_ed25519, made by ssh-keygen -t ed25519); nothing was written")
    listed = _run(["-l", "-f", str(key)])
    if listed.returncode != 0:
        raise UserError(f"--sign-key {key}: ssh-keygen cannot read it as a key ({_said(listed)}); nothing was written")
    fields = listed.stdout.decode("utf-8", "replace").split()
    public = key.read_bytes()[:4] in (b"ssh-", b"ecds", b"sk-s")
    if (quiet or many) and not public and _run(["-y", "-P", "", "-f", str(key)]).returncode != 0:
        why = ("and --quiet asks for none" if quiet else "and a build signs every campaign's bundle: it would ask for it "
               "each time")
        raise UserError(f"--sign-key {key} has a passphrase, {why}: load it into ssh-agent (ssh-add {key}) and pass its "
                        f"public key (--sign-key {key}.pub){', or leave out --quiet' if quiet else ''}; nothing was written")
    return Signer(key, fields[1], fields[-1].strip("()"), quiet)


def sign(data: bytes, key: Signer) -> bytes:
    """Return the SSHSIG signature of DATA (Ed25519: the same bytes for the same key and data)."""
    result = _run(["-Y", "sign", "-f", str(key.key), "-n", NAMESPACE], data, quiet=key.quiet)
    if result.returncode != 0 or not result.stdout.startswith(b"-----BEGIN SSH SIGNATURE-----"):
        raise UserError(f"ssh-keygen could not sign with {key.key} ({_said(result)}); nothing was written")
    return result.stdout


def readme(key: Signer) -> bytes:
    """Return signatures/README.txt: who signed, and the commands that check it with OpenSSH alone."""
    return f"""This bag's tag manifest (tagmanifest-sha256.txt) is signed with the OpenSSH key {key.fingerprint} ({key.kind}),
namespace {NAMESPACE}. The tag manifest lists the sha256 of manifest-sha256.txt and bag-info.txt, and
manifest-sha256.txt that of every file under data/: the one signature covers the whole bag.

Check it with OpenSSH and coreutils alone, in the bag's top folder. ALLOWED is a file of the keys you trust, one line
each, "NAME KEY" (for example: archivist@example.org ssh-ed25519 AAAA...; see ALLOWED SIGNERS in ssh-keygen(1)):

  ssh-keygen -Y verify -f ALLOWED -I NAME -n {NAMESPACE} -s {SIGNATURE} < tagmanifest-sha256.txt
  sha256sum -c tagmanifest-sha256.txt && sha256sum -c manifest-sha256.txt

Or, with iteralab: iteralab verify BUNDLE.zip --allowed-signers ALLOWED
""".encode()


def signature_files(tag_manifest: bytes, key: Signer) -> dict[str, bytes]:
    """Return the tag files a signed bag adds: the signature of TAG_MANIFEST and the README saying how to check it."""
    return {SIGNATURE: sign(tag_manifest, key), README: readme(key)}


def _namespace(signature: bytes) -> str | None:
    """Read the namespace an SSHSIG signature was made for (its armour's blob: magic, version, key, namespace)."""
    try:
        body = b"".join(line for line in signature.strip().split(b"\n")[1:-1])
        blob = base64.b64decode(body, validate=True)
        if blob[:6] != b"SSHSIG":
            return None
        at = 10  # magic and a uint32 version
        for _ in range(2):  # the public key, then the namespace
            length = int.from_bytes(blob[at:at + 4], "big")
            value, at = blob[at + 4:at + 4 + length], at + 4 + length
        return value.decode("utf-8")
    except (ValueError, IndexError, UnicodeDecodeError):
        return None


def check(data: bytes, signature: bytes, allowed_signers: Path | None) -> tuple[dict | None, str | None]:
    """Check SIGNATURE over DATA; return who signed ({fingerprint, principal, checked}) or the problem, in words."""
    namespace = _namespace(signature)
    if namespace is None:
        return None, f"{SIGNATURE}: not an OpenSSH signature"
    if namespace != NAMESPACE:
        return None, f"{SIGNATURE}: made for the namespace {namespace!r}, not {NAMESPACE!r}: it does not sign evidence bundles"
    with tempfile.TemporaryDirectory(prefix="iteralab-signature-") as folder:
        path = Path(folder) / "tagmanifest-sha256.txt.sig"
        path.write_bytes(signature)
        found = _run(["-Y", "check-novalidate", "-n", NAMESPACE, "-s", str(path)], data)
        said = found.stdout.decode("utf-8", "replace") + found.stderr.decode("utf-8", "replace")
        fingerprint = next((word for word in said.split() if word.startswith("SHA256:")), None)
        if found.returncode != 0 or fingerprint is None:
            return None, (f"{SIGNATURE}: does not match tagmanifest-sha256.txt (the bag was changed after it was signed, "
                          f"or the signature was): {_said(found)}")
        if allowed_signers is None:
            return {"fingerprint": fingerprint, "principal": None, "checked": False}, None
        return _against(data, path, fingerprint, Path(allowed_signers))


def _against(data: bytes, path: Path, fingerprint: str, allowed: Path) -> tuple[dict | None, str | None]:
    """Check a signature that matches its data against the keys ALLOWED lists."""
    if not allowed.is_file():
        raise UserError(f"--allowed-signers {allowed}: no such file; give an OpenSSH allowed signers file "
                        "(one line per trusted key: NAME KEY, see ssh-keygen(1))")
    principals = _run(["-Y", "find-principals", "-s", str(path), "-f", str(allowed)])
    names = principals.stdout.decode("utf-8", "replace").split()
    if principals.returncode != 0 or not names:
        return None, f"{SIGNATURE}: signed by {fingerprint}, a key that {allowed} does not list"
    verified = _run(["-Y", "verify", "-f", str(allowed), "-I", names[0], "-n", NAMESPACE, "-s", str(path)], data)
    if verified.returncode != 0:
        return None, f"{SIGNATURE}: refused by ssh-keygen -Y verify against {allowed}: {_said(verified)}"
    return {"fingerprint": fingerprint, "principal": names[0], "checked": True}, None
