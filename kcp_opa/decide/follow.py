"""Following a bundle source: a file, an unpacked bundle directory, or an HTTP(S) URL polled as
OPA's bundle service protocol does (``If-None-Match`` with the last ETag; 304 means unchanged).

A new version is written beside the local copy, handed to ``activate`` (a gate's, or the
service's reload), which verifies, plans and swaps it; only then does it replace the local
copy. A failure keeps what is serving and is reported in :meth:`BundleFollower.status`; the
same failing bytes are not retried until the source changes.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import os
import tempfile
import threading
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import structlog

from kcp_opa.compile.bundle import MAX_BUNDLE_BYTES, BundleFile, tarball_bytes
from kcp_opa.core.errors import BundleError, KcpOpaError
from kcp_opa.core.jsonread import JsonDict

_log = structlog.get_logger("kcp_opa.follow")
HTTP_TIMEOUT_S = 30


@dataclass(frozen=True)
class Fetched:
    content: bytes
    etag: str | None = None


class BundleSource(Protocol):
    """Where new bundle versions come from; ``fetch`` returns None when nothing changed."""

    description: str

    def fetch(self, etag: str | None) -> Fetched | None: ...


class FileSource:
    """A bundle tarball on disk (e.g. a path a deploy job replaces atomically)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.description = str(self.path)

    def fetch(self, etag: str | None) -> Fetched | None:
        try:
            content = self.path.read_bytes()
        except OSError as exc:
            raise BundleError(f"{self.path}: cannot read the bundle source: {exc.strerror or exc}") from None
        tag = hashlib.sha256(content).hexdigest()
        return None if tag == etag else Fetched(content, tag)


class DirectorySource:
    """An unpacked bundle directory (``.manifest``, ``data.json`` files, modules), packed deterministically."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.description = str(self.path)

    def fetch(self, etag: str | None) -> Fetched | None:
        files = []
        try:
            for item in sorted(self.path.rglob("*")):
                if item.is_file() and not item.is_symlink():
                    files.append(BundleFile(item.relative_to(self.path).as_posix(), item.read_bytes()))
        except OSError as exc:
            raise BundleError(f"{self.path}: cannot read the bundle directory: {exc.strerror or exc}") from None
        content = tarball_bytes(files)
        tag = hashlib.sha256(content).hexdigest()
        return None if tag == etag else Fetched(content, tag)


class HttpSource:
    """An HTTP(S) bundle server; sends ``If-None-Match`` and keeps the ``ETag`` it answers with."""

    def __init__(self, url: str, *, headers: dict[str, str] | None = None, timeout: float = HTTP_TIMEOUT_S) -> None:
        if not url.startswith(("http://", "https://")):
            raise BundleError(f"{url}: a bundle URL must be http:// or https://")
        self.url, self.headers, self.timeout = url, dict(headers or {}), timeout
        self.description = url.split("?", 1)[0]  # never a query string (it may carry a token)

    def fetch(self, etag: str | None) -> Fetched | None:
        request = urllib.request.Request(self.url, headers=self.headers)  # noqa: S310 (scheme checked)
        if etag:
            request.add_header("If-None-Match", etag)
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:  # noqa: S310
                content = response.read(MAX_BUNDLE_BYTES + 1)
                tag = response.headers.get("ETag")
        except urllib.error.HTTPError as exc:
            if exc.code == 304:
                return None
            raise BundleError(f"{self.description}: the bundle server answered HTTP {exc.code}") from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise BundleError(f"{self.description}: the bundle server is unreachable ({reason})") from None
        if len(content) > MAX_BUNDLE_BYTES:
            raise BundleError(f"{self.description}: bundle larger than {MAX_BUNDLE_BYTES >> 20} MiB")
        return Fetched(content, tag)


def source_of(spec: str) -> BundleSource:
    """An URL, a directory or a file, by what ``spec`` names."""
    if spec.startswith(("http://", "https://")):
        return HttpSource(spec)
    return DirectorySource(spec) if Path(spec).is_dir() else FileSource(spec)


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class BundleFollower:
    """Polls ``source`` and activates each new version; ``local`` keeps the last activated copy."""

    def __init__(
        self,
        source: BundleSource,
        activate: Callable[[Path], object],
        local: str | Path,
        *,
        interval_seconds: float = 30.0,
    ) -> None:
        self.source, self.activate, self.local = source, activate, Path(local)
        self.interval = interval_seconds
        self.etag: str | None = None
        self.last_poll: str | None = None
        self.last_activation: str | None = None
        self.last_error: str | None = None
        self.activations = 0
        self._failed_sha: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def poll_once(self) -> bool:
        """One poll: True when a new version was activated. Never raises for a bad version."""
        with self._lock:
            self.last_poll = _now()
            try:
                fetched = self.source.fetch(self.etag)
            except KcpOpaError as exc:
                self.last_error = str(exc)
                _log.error("bundle_source_failed", source=self.source.description, error=str(exc))
                return False
            if fetched is None:
                return False
            digest = hashlib.sha256(fetched.content).hexdigest()
            if digest == self._failed_sha:
                return False  # the version already refused: reported once, kept off
            return self._try(fetched, digest)

    def _try(self, fetched: Fetched, digest: str) -> bool:
        self.local.parent.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(prefix=f".{self.local.name}.", suffix=".tar.gz", dir=self.local.parent)
        candidate = Path(name)
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(fetched.content)
            self.activate(candidate)
            candidate.replace(self.local)
        except KcpOpaError as exc:
            candidate.unlink(missing_ok=True)
            self._failed_sha, self.last_error = digest, str(exc)
            _log.error("bundle_version_refused", source=self.source.description, sha256=digest, error=str(exc))
            return False
        except BaseException:
            candidate.unlink(missing_ok=True)
            raise
        self.etag, self._failed_sha = fetched.etag or digest, None
        self.last_activation, self.last_error = _now(), None
        self.activations += 1
        return True

    def status(self) -> JsonDict:
        return {
            "source": self.source.description,
            "etag": self.etag,
            "last_poll": self.last_poll,
            "last_activation": self.last_activation,
            "last_error": self.last_error,
            "activations": self.activations,
        }

    def start(self) -> None:
        """Poll every ``interval_seconds`` on a daemon thread until :meth:`stop`."""

        def loop() -> None:
            while not self._stop.wait(self.interval):
                try:
                    self.poll_once()
                except Exception as exc:  # a poller must never die silently
                    self.last_error = f"{type(exc).__name__}: {exc}"
                    _log.error("bundle_poll_crashed", error=self.last_error)

        self._thread = threading.Thread(target=loop, name="kcp-opa-bundle-follower", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.interval + HTTP_TIMEOUT_S)
