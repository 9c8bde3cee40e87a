"""OPA bundles on disk: a deterministic writer and a careful reader.

The writer makes ``opa eval -b`` loadable ``.tar.gz`` files whose bytes depend only on their
contents (sorted members, zero mtimes and owners, a gzip header without name or time), and it
never leaves a partial file behind. The reader is the one both engine adapters use: regopy
reads neither tarballs nor per-directory ``data.json`` files (docs/engine-findings.md), so the data is
merged here once, exactly as OPA mounts it.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import posixpath
import tarfile
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

from kcp_opa.compile.signatures import SIGNATURES_NAME, SignatureInfo, Verification, verify_members
from kcp_opa.core.canonical import canonical_json
from kcp_opa.core.errors import BundleError
from kcp_opa.core.files import read_regular, replace_atomically
from kcp_opa.core.jsonread import JsonDict, JsonObject, mapping
from kcp_opa.declare.parameters import MatrixParameters, ParametersError, compiled_parameters

MANIFEST_NAME = ".manifest"
MAX_BUNDLE_BYTES = 512 * 1024 * 1024
DEFAULT_MAX_DECOMPRESSED = 512 * 1024 * 1024
DEFAULT_MAX_MEMBERS = 10_000


@dataclass(frozen=True)
class BundleFile:
    path: str
    content: bytes


@dataclass(frozen=True)
class LoadedBundle:
    """A bundle read back: its .manifest, merged data document and Rego modules."""

    source: str
    manifest: Mapping[str, Any]
    data: Mapping[str, Any]
    modules: Mapping[str, str]
    sha256: str
    #: The verified signature (None: an unsigned bundle, loaded without verification keys).
    signature: SignatureInfo | None = None

    @property
    def signer(self) -> str | None:
        """The key id that signed the bundle, when it is signed and verified."""
        return None if self.signature is None else self.signature.key_id

    @property
    def revision(self) -> str:
        return str(self.manifest.get("revision", ""))

    @property
    def roots(self) -> list[str]:
        return list(self.manifest.get("roots", [""]))

    @cached_property
    def parameters(self) -> MatrixParameters:
        """The matrix parameters the bundle carries, typed and read once (defaults where absent);
        a malformed part is a BundleError, never read as absent."""
        try:
            return compiled_parameters(self.data)
        except ParametersError as exc:
            raise BundleError(f"{self.source}: {exc}") from None


def content_revision(files: Sequence[BundleFile]) -> str:
    """A revision that names the content: sha256 over each member's path and sha256."""
    digest = hashlib.sha256()
    for member in sorted(files, key=lambda f: f.path):
        digest.update(member.path.encode("utf-8") + b"\0" + hashlib.sha256(member.content).digest())
    return digest.hexdigest()


def tarball_bytes(files: Sequence[BundleFile]) -> bytes:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for member in sorted(files, key=lambda f: f.path):
            info = tarfile.TarInfo(member.path)
            info.size = len(member.content)
            info.mtime = 0
            info.mode = 0o644
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            tar.addfile(info, io.BytesIO(member.content))
    packed = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=packed, mtime=0, compresslevel=9) as gz:
        gz.write(raw.getvalue())
    return packed.getvalue()


def write_atomically(path: Path, content: bytes, verify: Callable[[Path], None] | None = None) -> None:
    """Write to a temporary file beside ``path``, fsync, ``verify`` it, then rename: all or nothing.

    A bundle that fails ``verify`` never replaces the one already at ``path``.
    """
    try:
        replace_atomically(path, content, verify)
    except OSError as exc:
        raise BundleError(f"{path}: cannot write the bundle: {exc.strerror or exc}") from None


@dataclass(frozen=True)
class BundleLimits:
    """What a bundle may inflate to before it is refused (a tar bomb costs at most this much).

    Defaults: 512 MiB decompressed, 10,000 members; ``KCP_OPA_BUNDLE_MAX_BYTES`` and
    ``KCP_OPA_BUNDLE_MAX_MEMBERS`` override them for a process.
    """

    max_decompressed_bytes: int = DEFAULT_MAX_DECOMPRESSED
    max_members: int = DEFAULT_MAX_MEMBERS

    @classmethod
    def from_env(cls) -> BundleLimits:
        def number(variable: str, default: int) -> int:
            text = os.environ.get(variable, "").strip()
            if not text:
                return default
            if not text.isdigit() or int(text) < 1:
                raise BundleError(f"{variable}={text!r}: expected a positive integer")
            return int(text)

        return cls(
            number("KCP_OPA_BUNDLE_MAX_BYTES", DEFAULT_MAX_DECOMPRESSED),
            number("KCP_OPA_BUNDLE_MAX_MEMBERS", DEFAULT_MAX_MEMBERS),
        )


def read_bundle(
    path: str | Path,
    *,
    limits: BundleLimits | None = None,
    verification: Verification | None = None,
    skip_verification: bool = False,
) -> LoadedBundle:
    """Read and check a bundle tarball; any defect is a :class:`BundleError`.

    Signatures follow OPA: with ``verification`` the bundle must carry a ``.signatures.json``
    that verifies under one of its keys and scope; without it a signed bundle is refused.
    ``skip_verification`` is for a child re-reading bytes its parent already verified.
    A content-derived revision (64 hex, what compile writes by default) must still name the
    content: an edit that keeps the revision string is refused.

    Beyond the format: the inflated size and member count are capped (``limits``), a member
    may appear once, roots may not overlap, and every file's sha256 recorded in the
    ``.manifest`` metadata (``files``, and ``sources`` for the policies) must match its bytes,
    so an edited module under an unchanged ``.manifest`` is refused.
    """
    source = str(path)
    try:
        packed = read_regular(path, MAX_BUNDLE_BYTES)
    except OSError as exc:
        raise BundleError(f"{source}: cannot read bundle: {exc.strerror or exc}") from None
    if len(packed) > MAX_BUNDLE_BYTES:
        raise BundleError(f"{source}: bundle larger than {MAX_BUNDLE_BYTES >> 20} MiB")
    members = _members(packed, source, limits or BundleLimits.from_env())
    signature = None if skip_verification else verify_members(members, verification, source)
    members.pop(SIGNATURES_NAME, None)
    if MANIFEST_NAME not in members:
        raise BundleError(f"{source}: no .manifest: not a kcp-opa bundle")
    manifest = _json(members.pop(MANIFEST_NAME), source, MANIFEST_NAME)
    if not isinstance(manifest, dict):
        raise BundleError(f"{source}: .manifest is not a JSON object")
    roots = manifest.get("roots", [""])
    _check_roots(roots, source)
    _check_hashes(manifest, members, source)
    _check_revision(manifest, members, source)
    data: JsonDict = {}
    modules: dict[str, str] = {}
    for name, content in sorted(members.items()):
        if posixpath.basename(name) == "data.json":
            mount = posixpath.dirname(name)
            _check_in_roots(mount, roots, source, name)
            _mount(data, mount, _json(content, source, name), source, name)
        elif name.endswith(".rego"):
            try:
                modules[name] = content.decode("utf-8")
            except UnicodeDecodeError:
                raise BundleError(f"{source}: {name} is not UTF-8") from None
    return LoadedBundle(source, manifest, data, modules, hashlib.sha256(packed).hexdigest(), signature)


def peek_revision(path: str | Path) -> str:
    """The revision a bundle's .manifest claims, read without any check ("" when there is none):
    for saying which bundle a refused file pretends to be, never for loading it."""
    try:
        members = _members(Path(path).read_bytes(), str(path), BundleLimits.from_env())
        manifest = json.loads(members.get(MANIFEST_NAME, b"{}"))
    except (BundleError, OSError, ValueError):
        return ""
    return str(manifest.get("revision", "")) if isinstance(manifest, dict) else ""


def is_content_revision(revision: str) -> bool:
    """64 lowercase hex: the form compile gives a revision derived from the content."""
    return len(revision) == 64 and all(c in "0123456789abcdef" for c in revision)


def _check_revision(manifest: JsonObject, members: Mapping[str, bytes], source: str) -> None:
    """A content-derived revision must be the digest of these members and this metadata."""
    revision = manifest.get("revision")
    kcp = mapping(manifest.get("metadata")).get("kcp_opa")
    if not isinstance(revision, str) or not is_content_revision(revision) or not isinstance(kcp, Mapping):
        return
    files = [BundleFile(name, content) for name, content in members.items()]
    if content_revision([*files, BundleFile(".metadata", canonical_json(kcp))]) != revision:
        raise BundleError(f"{source}: revision {revision[:12]}... does not name this content (edited after compile)")


class _Inflated(io.RawIOBase):
    """The gunzipped stream, refused the moment it would pass ``limit`` bytes: a bomb costs
    at most the limit, never the 1 GiB a member's header announces."""

    def __init__(self, packed: bytes, source: str, limit: int) -> None:
        self._gz = gzip.GzipFile(fileobj=io.BytesIO(packed), mode="rb")
        self.source, self.remaining = source, limit

    def readable(self) -> bool:
        return True

    def read(self, size: int | None = -1) -> bytes:
        want = self.remaining + 1 if size is None or size < 0 else min(size, self.remaining + 1)
        chunk = self._gz.read(want)
        self.remaining -= len(chunk)
        if self.remaining < 0:
            raise _TooLarge()
        return chunk


class _TooLarge(Exception):
    """Raised inside tarfile's reads; worded by :func:`_members`."""


def _members(packed: bytes, source: str, limits: BundleLimits) -> dict[str, bytes]:
    out: dict[str, bytes] = {}
    limit = limits.max_decompressed_bytes
    too_large = f"{source}: inflates to more than {limit} bytes (KCP_OPA_BUNDLE_MAX_BYTES)"
    stream = _Inflated(packed, source, limit)
    try:
        with tarfile.open(fileobj=stream, mode="r|") as tar:
            for count, info in enumerate(tar, start=1):
                if count > limits.max_members:
                    raise BundleError(f"{source}: more than {limits.max_members} members (KCP_OPA_BUNDLE_MAX_MEMBERS)")
                if info.size > stream.remaining:  # from the header, before a byte of the member is read
                    raise BundleError(f"{too_large}: member {info.name[:80]!r} declares {info.size} bytes")
                name = posixpath.normpath(info.name.removeprefix("./"))
                if info.isdir():
                    continue
                if not info.isfile():
                    raise BundleError(f"{source}: member {info.name!r} is not a regular file")
                if name.startswith("/") or ".." in name.split("/") or name == ".":
                    raise BundleError(f"{source}: member {info.name!r} escapes the bundle")
                if name in out:
                    raise BundleError(f"{source}: member {name!r} appears twice (which one would count?)")
                extracted = tar.extractfile(info)
                if extracted is None:  # pragma: no cover - isfile() guarantees content
                    raise BundleError(f"{source}: member {info.name!r} has no content")
                out[name] = extracted.read()
    except _TooLarge:
        raise BundleError(too_large) from None
    except (tarfile.TarError, OSError, EOFError, zlib.error) as exc:
        raise BundleError(f"{source}: not a gzipped tar bundle ({exc})") from None
    return out


def _check_roots(roots: object, source: str) -> None:
    if not isinstance(roots, list) or not all(isinstance(r, str) for r in roots):
        raise BundleError(f"{source}: .manifest roots must be a list of strings")
    for index, first in enumerate(roots):
        for second in roots[index + 1 :]:
            a, b = sorted((first.strip("/"), second.strip("/")), key=len)
            if a == b or a == "" or b.startswith(f"{a}/"):
                raise BundleError(f"{source}: .manifest roots {first!r} and {second!r} overlap")


def _check_hashes(manifest: JsonObject, members: Mapping[str, bytes], source: str) -> None:
    """Every sha256 the metadata records must match the member it names, and name every module."""
    kcp = mapping(manifest.get("metadata")).get("kcp_opa")
    if not isinstance(kcp, Mapping):
        return  # not a kcp-opa bundle: nothing recorded to check (the engine refuses it anyway)
    expected: JsonDict = {}
    sources = kcp.get("sources")
    if isinstance(sources, Mapping):
        expected.update({k.removeprefix("policies/"): v for k, v in sources.items() if k.startswith("policies/")})
    files = kcp.get("files")
    if isinstance(files, Mapping):
        expected.update(files)
        unlisted = sorted(set(members) - set(files) - set(expected))
    else:
        unlisted = sorted(name for name in members if name.endswith(".rego") and name not in expected)
    if unlisted:
        raise BundleError(f"{source}: {unlisted[0]} is not recorded in the .manifest metadata (added after compile)")
    for name, digest in sorted(expected.items()):
        if name not in members:
            raise BundleError(f"{source}: {name} is recorded in the .manifest metadata but missing")
        if hashlib.sha256(members[name]).hexdigest() != digest:
            raise BundleError(f"{source}: {name} does not match its sha256 in the .manifest (edited after compile)")


def _json(content: bytes, source: str, name: str) -> object:
    try:
        return json.loads(content.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BundleError(f"{source}: {name} is not valid JSON ({exc})") from None


def _check_in_roots(mount: str, roots: object, source: str, name: str) -> None:
    if not isinstance(roots, list):
        raise BundleError(f"{source}: .manifest roots must be a list")
    if not any(r == "" or mount == r or mount.startswith(f"{r}/") for r in roots):
        raise BundleError(f"{source}: {name} lies outside the bundle roots {roots}")


def _mount(data: JsonDict, mount: str, value: object, source: str, name: str) -> None:
    parts = [p for p in mount.split("/") if p]
    if not parts:
        if not isinstance(value, dict):
            raise BundleError(f"{source}: root data.json must be an object")
        for key, item in value.items():
            _mount(data, key, item, source, name)
        return
    node = data
    for part in parts[:-1]:
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise BundleError(f"{source}: {name} overlaps data already at {mount}")
        node = child
    if parts[-1] in node:
        raise BundleError(f"{source}: {name} overlaps data already at {mount}")
    node[parts[-1]] = value
