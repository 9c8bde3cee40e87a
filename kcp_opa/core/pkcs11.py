"""An Ed25519 signer whose private key stays in an HSM, reached through PKCS#11 (RFC 7512 URIs).

``pkcs11:token=kcp-gate;object=receipts-2026?pin-source=file:/run/secrets/pin`` names the token
by label and the key by label (``object``) and/or ``id``. The PIN comes from ``pin-source``
(``file:PATH`` or ``env:VARIABLE``) or from ``$KCP_OPA_PKCS11_PIN``; a ``pin-value`` in the URI
is refused, because a URI travels in argv and process listings. The module is ``module-path``,
else ``$KCP_OPA_PKCS11_MODULE``, else the first SoftHSM2 library found. The kid is ``x-kid``,
else the object label. Only a key the token holds as sensitive and never extractable is used:
signing happens on the token (``CKM_EDDSA``); verification uses the public key read from it.
Needs ``python-pkcs11`` (the ``pkcs11`` extra).
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import os
import threading
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from kcp_opa.core.errors import KeyringError
from kcp_opa.core.keys import ED25519, ED25519_SIGNATURE_BYTES, Ed25519Key, Key, b64url, verify_ed25519

if TYPE_CHECKING:
    from pkcs11 import Session, SignMixin
    from pkcs11._pkcs11 import lib as Pkcs11Library

PKCS11_SCHEME = "pkcs11:"
PIN_ENV = "KCP_OPA_PKCS11_PIN"
MODULE_ENV = "KCP_OPA_PKCS11_MODULE"
KNOWN_MODULES = (
    "/usr/lib/softhsm/libsofthsm2.so",
    "/usr/lib/x86_64-linux-gnu/softhsm/libsofthsm2.so",
    "/usr/lib/aarch64-linux-gnu/softhsm/libsofthsm2.so",
    "/usr/local/lib/softhsm/libsofthsm2.so",
)
ED25519_OID = "1.3.101.112"
_PATH_ATTRIBUTES = {"token", "object", "id", "type", "manufacturer", "model", "serial", "library-manufacturer"}
_QUERY_ATTRIBUTES = {"pin-source", "pin-value", "module-path", "module-name", "x-kid"}


@dataclass(frozen=True)
class Pkcs11Uri:
    """The parts of an RFC 7512 URI this signer reads (percent-decoded)."""

    token: str
    object: str | None
    id: bytes | None
    pin_source: str | None
    module_path: str | None
    kid: str | None
    text: str

    @classmethod
    def parse(cls, text: str) -> Pkcs11Uri:
        if not text.startswith(PKCS11_SCHEME):
            raise KeyringError(f"not a pkcs11: URI: {_redacted(text)}", "malformed_key")
        path, _, query = text[len(PKCS11_SCHEME) :].partition("?")
        found: dict[str, bytes] = {}
        for part, known, separator in ((path, _PATH_ATTRIBUTES, ";"), (query, _QUERY_ATTRIBUTES, "&")):
            for item in filter(None, part.split(separator)):
                name, equals, value = item.partition("=")
                if not equals or name not in known or name in found:
                    raise KeyringError(f"pkcs11 URI attribute {name!r} is unknown, empty or repeated", "malformed_key")
                found[name] = urllib.parse.unquote_to_bytes(value)
        if "pin-value" in found:
            raise KeyringError(
                f"a PIN in a pkcs11 URI ends up in argv and process listings: use pin-source or ${PIN_ENV}",
                "pin_in_uri",
            )
        if "token" not in found or ("object" not in found and "id" not in found):
            raise KeyringError("a pkcs11 signing key URI names its token and its object (label) or id", "malformed_key")
        if found.get("type", b"private") != b"private":
            raise KeyringError("a pkcs11 signing key URI names a private key (type=private)", "malformed_key")

        def text_of(name: str) -> str | None:
            raw = found.get(name)
            try:
                return None if raw is None else raw.decode("utf-8", "strict")
            except UnicodeDecodeError:
                raise KeyringError(f"pkcs11 URI attribute {name!r} is not UTF-8", "malformed_key") from None

        return cls(
            token=str(text_of("token")),
            object=text_of("object"),
            id=found.get("id"),
            pin_source=text_of("pin-source"),
            module_path=text_of("module-path"),
            kid=text_of("x-kid"),
            text=text,
        )

    def pin(self) -> str:
        """The user PIN from ``pin-source`` or the environment; never from the URI itself."""
        source = self.pin_source
        if source is None:
            value = os.environ.get(PIN_ENV)
            if not value:
                raise KeyringError(f"the token's PIN is not set: give pin-source or ${PIN_ENV}", "no_secret")
            return value
        if source.startswith("env:"):
            value = os.environ.get(source[4:])
            if not value:
                raise KeyringError(f"environment variable {source[4:]} (the token's PIN) is not set", "no_secret")
            return value
        location = source.removeprefix("file:")
        try:
            return Path(location).read_text(encoding="utf-8").rstrip("\r\n")
        except OSError as exc:
            raise KeyringError(f"cannot read the PIN from {location}: {exc.strerror or exc}", "no_secret") from None

    def module(self) -> str:
        chosen = self.module_path or os.environ.get(MODULE_ENV)
        if chosen:
            return chosen
        for candidate in KNOWN_MODULES:
            if Path(candidate).is_file():
                return candidate
        raise KeyringError(f"no PKCS#11 module: give module-path in the URI or ${MODULE_ENV}", "no_pkcs11_module")


def _redacted(text: str) -> str:
    return text.split("?", 1)[0]


@dataclass(frozen=True)
class Pkcs11Key:
    """Signs on the token; the private key never leaves it. One session, used under a lock."""

    kid: str
    uri: str
    public_key: Ed25519PublicKey
    session: Session = field(repr=False, compare=False)
    handle: SignMixin = field(repr=False, compare=False)
    retired: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    @property
    def alg(self) -> str:
        return ED25519

    @property
    def can_sign(self) -> bool:
        return True

    def sign(self, message: bytes) -> str:
        from pkcs11 import Mechanism, PKCS11Error

        try:
            with self.lock:
                raw = self.handle.sign(message, mechanism=Mechanism.EDDSA)
        except PKCS11Error as exc:
            raise KeyringError(f"the HSM did not sign with {self.kid}: {type(exc).__name__}", "hsm_error") from None
        if len(raw) != ED25519_SIGNATURE_BYTES:
            raise KeyringError(f"the HSM returned a {len(raw)}-byte Ed25519 signature", "hsm_error")
        return b64url(raw)

    def verify(self, message: bytes, value: str) -> bool:
        return verify_ed25519(self.public_key, message, value)

    def public(self) -> Key | None:
        return Ed25519Key(self.kid, public_key=self.public_key, retired=self.retired)

    def retire(self) -> Key:
        return dataclasses.replace(self, retired=True)

    def close(self) -> None:
        with self.lock:
            self.session.close()


def _library(module: str) -> Pkcs11Library:
    try:
        import pkcs11
    except ImportError:
        raise KeyringError(
            "pkcs11: signing keys need python-pkcs11 (pip install 'kcp-opa[pkcs11]')", "no_pkcs11_module"
        ) from None
    try:
        return pkcs11.lib(module)
    except (RuntimeError, OSError, pkcs11.PKCS11Error) as exc:
        raise KeyringError(f"cannot load the PKCS#11 module {module}: {exc}", "no_pkcs11_module") from None


#: (module, token label) -> sha256 of the PIN this process logged in with.
_LOGGED_IN: dict[tuple[str, str], bytes] = {}


def open_session(uri: Pkcs11Uri, *, rw: bool = False) -> Session:
    """Log in to the token the URI names (the PIN from pin-source or the environment)."""
    from pkcs11 import exceptions

    module = uri.module()
    lib = _library(module)
    pin = uri.pin()
    digest = hashlib.sha256(pin.encode("utf-8")).digest()
    try:
        token = lib.get_token(token_label=uri.token)
        try:
            session: Session = token.open(rw=rw, user_pin=pin)
            _LOGGED_IN[(module, uri.token)] = digest
        except exceptions.UserAlreadyLoggedIn:
            # PKCS#11 logs in once per process and token: a second key on it needs no second login,
            # but the PIN it was given must still be the one that logged in.
            if not hmac.compare_digest(_LOGGED_IN.get((module, uri.token), b""), digest):
                raise exceptions.PinIncorrect() from None
            session = token.open(rw=rw)
    except exceptions.NoSuchToken:
        raise KeyringError(f"no PKCS#11 token labelled {uri.token!r}", "no_such_key") from None
    except (exceptions.PinIncorrect, exceptions.PinInvalid, exceptions.PinLenRange):
        raise KeyringError(f"the PIN for token {uri.token!r} is refused", "bad_pin") from None
    except exceptions.PKCS11Error as exc:
        raise KeyringError(f"token {uri.token!r}: {type(exc).__name__}", "hsm_error") from None
    return session


def open_pkcs11_key(text: str, *, kid: str | None = None, retired: bool = False) -> Pkcs11Key:
    """The Ed25519 private key the URI names, checked to be sensitive and never extractable."""
    from pkcs11 import Attribute, KeyType, ObjectClass, SignMixin, exceptions

    uri = Pkcs11Uri.parse(text)
    session = open_session(uri)
    try:
        private = session.get_key(ObjectClass.PRIVATE_KEY, label=uri.object, id=uri.id)
        public = session.get_key(ObjectClass.PUBLIC_KEY, label=uri.object, id=uri.id)
        if (
            not isinstance(private, SignMixin)
            or private.key_type != KeyType.EC_EDWARDS
            or _curve(public[Attribute.EC_PARAMS]) != ED25519_OID
        ):
            raise KeyringError(
                f"{_redacted(text)} is not an Ed25519 key (receipts are HMAC-SHA256 or Ed25519)", "unsupported_key"
            )
        if private[Attribute.EXTRACTABLE] or not private[Attribute.SENSITIVE]:
            raise KeyringError(f"{_redacted(text)} can leave the token (extractable or not sensitive)", "weak_key")
        point = _octets(public[Attribute.EC_POINT])
        public_key = Ed25519PublicKey.from_public_bytes(point)
    except exceptions.NoSuchKey:
        session.close()
        raise KeyringError(f"{_redacted(text)}: no such key pair on the token", "no_such_key") from None
    except exceptions.MultipleObjectsReturned:
        session.close()
        raise KeyringError(f"{_redacted(text)}: names more than one key; add id", "malformed_key") from None
    except (KeyringError, ValueError, exceptions.PKCS11Error):
        session.close()
        raise
    label = uri.object or (uri.id.hex() if uri.id else "")
    return Pkcs11Key(kid or uri.kid or label, text, public_key, session, private, retired)


def create_pkcs11_ed25519(text: str, *, kid: str | None = None) -> Pkcs11Key:
    """Generate an Ed25519 key pair on the token, private part sensitive and never extractable."""
    from pkcs11 import Attribute, KeyType, Mechanism, ObjectClass
    from pkcs11.util.ec import encode_named_curve_parameters

    uri = Pkcs11Uri.parse(text)
    with open_session(uri, rw=True) as session:
        named: dict[Attribute, ObjectClass | str | bytes] = {Attribute.CLASS: ObjectClass.PRIVATE_KEY}
        if uri.object is not None:
            named[Attribute.LABEL] = uri.object
        if uri.id is not None:
            named[Attribute.ID] = uri.id
        if any(True for _ in session.get_objects(named)):
            raise KeyringError(f"{_redacted(text)}: the token already holds that key; name a new one", "duplicate_kid")
        session.generate_keypair(
            KeyType.EC_EDWARDS,
            store=True,
            label=uri.object,
            id=uri.id,
            mechanism=Mechanism.EC_EDWARDS_KEY_PAIR_GEN,
            public_template={Attribute.EC_PARAMS: encode_named_curve_parameters(ED25519_OID)},
            private_template={Attribute.EXTRACTABLE: False, Attribute.SENSITIVE: True, Attribute.TOKEN: True},
        )
    return open_pkcs11_key(text, kid=kid)


def _octets(der: bytes) -> bytes:
    """The raw point of a DER OCTET STRING (how CKA_EC_POINT holds an Ed25519 public key)."""
    if len(der) == 34 and der[:2] == b"\x04\x20":
        return der[2:]
    if len(der) == 32:  # some tokens store the raw point
        return der
    raise ValueError("CKA_EC_POINT is not a 32-byte Ed25519 point")


def _curve(params: bytes) -> str | None:
    """The OID in CKA_EC_PARAMS (DER), or None when it is a curve name or something else."""
    if len(params) < 2 or params[0] != 0x06 or params[1] != len(params) - 2:
        return "1.3.101.112" if params == b"\x13\x0cedwards25519" else None
    body = params[2:]
    parts = [str(body[0] // 40), str(body[0] % 40)]
    value = 0
    for byte in body[1:]:
        value = (value << 7) | (byte & 0x7F)
        if not byte & 0x80:
            parts.append(str(value))
            value = 0
    return ".".join(parts)
