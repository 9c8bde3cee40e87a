"""Bundle signatures in OPA's format: ``.signatures.json`` written at compile, verified at load.

The format is OPA's (``opa build --signing-key``; OPA's bundle sign.go, verify.go, hash.go): one
compact JWS whose payload lists every file of the bundle as ``{name, hash, algorithm}``, plus
``keyid`` (or the claims of a claims file) and an optional ``scope``. Rego and other files hash as
their bytes; ``data.json`` and ``.manifest`` hash as OPA hashes structured documents (keys sorted,
numbers as written, strings as Go encodes them), so a reformatted file still verifies and an
edited one does not. Verification follows OPA's reader: the file list must match the bundle
exactly, every hash must match, the key id must be one configured and the scope must be the one
expected; a signed bundle without a configured key and an unsigned one with a key both refuse.
Each refusal is a :class:`BundleSignatureError` with its own ``code`` and one line of text.
"""

from __future__ import annotations

import binascii
import hashlib
import hmac
import json
import posixpath
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, padding, rsa
from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature

from kcp_opa.compile.signkeys import PublicKey, algorithms_for, bundle_algorithm, key_fingerprint, read_pem
from kcp_opa.core.errors import BundleSignatureError
from kcp_opa.core.jsonread import JsonDict, JsonObject
from kcp_opa.core.keys import Signer, b64url, b64url_decode, strict_b64url

SIGNATURES_NAME = ".signatures.json"
HASH_ALGORITHM = "SHA-256"
_STRUCTURED = frozenset({"data.json", "data.yaml", ".manifest", SIGNATURES_NAME})


class _Number(str):
    """A JSON number kept as written: OPA hashes ``json.Number`` by its text."""


def _go_string(text: str) -> str:
    """``text`` as Go's encoding/json writes it with SetEscapeHTML(false)."""
    out = ['"']
    for char in text:
        code = ord(char)
        if char in '"\\':
            out.append("\\" + char)
        elif code < 0x20:
            out.append({"\n": "\\n", "\r": "\\r", "\t": "\\t", "\b": "\\b", "\f": "\\f"}.get(char, f"\\u{code:04x}"))
        elif code in (0x2028, 0x2029):
            out.append(f"\\u{code:04x}")
        elif 0xD800 <= code <= 0xDFFF:  # a lone surrogate is invalid UTF-8: Go writes U+FFFD
            out.append("\ufffd")
        else:
            out.append(char)
    out.append('"')
    return "".join(out)


def _walk(value: object, out: list[str]) -> None:
    if isinstance(value, dict):
        out.append("{")
        for index, key in enumerate(sorted(value)):
            if index:
                out.append(",")
            out.append(_go_string(key) + ":")
            _walk(value[key], out)
        out.append("}")
    elif isinstance(value, list):
        out.append("[")
        for index, item in enumerate(value):
            if index:
                out.append(",")
            _walk(item, out)
        out.append("]")
    elif isinstance(value, _Number):
        out.append(str.__str__(value))
    elif isinstance(value, str):
        out.append(_go_string(value))
    elif value is True:
        out.append("true")
    elif value is False:
        out.append("false")
    else:
        out.append("null")


def _refuse_constant(name: str) -> object:
    raise ValueError(f"{name} is not JSON")


def file_hash(name: str, content: bytes) -> str:
    """The hex SHA-256 OPA records for bundle file ``name``; raises ValueError for bad JSON."""
    if posixpath.basename(name) not in _STRUCTURED:
        return hashlib.sha256(content).hexdigest()
    value = json.loads(content.decode("utf-8"), parse_int=_Number, parse_float=_Number, parse_constant=_refuse_constant)
    parts: list[str] = []
    _walk(value, parts)
    return hashlib.sha256("".join(parts).encode("utf-8", "surrogatepass")).hexdigest()


def _json(value: object) -> bytes:
    """Go's json.Marshal of a map: keys sorted, compact."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


@dataclass(frozen=True)
class VerificationKey:
    key_id: str
    key: PublicKey = field(repr=False)

    @classmethod
    def load(cls, spec: str) -> VerificationKey:
        """``PATH`` or ``KEYID=PATH`` (a PEM public key); without KEYID the id is the key's fingerprint."""
        key_id, sep, path = spec.partition("=")
        if not sep:
            key_id, path = "", spec
        raw = read_pem(Path(path), "verification key")
        try:
            key = serialization.load_pem_public_key(raw)
        except (ValueError, TypeError) as exc:
            raise BundleSignatureError(f"{path}: not a PEM public key ({exc})", "key_invalid") from None
        if not isinstance(key, rsa.RSAPublicKey | ec.EllipticCurvePublicKey | ed25519.Ed25519PublicKey):
            raise BundleSignatureError(f"{path}: only RSA, EC P-256 and Ed25519 keys verify bundles", "key_invalid")
        return cls(key_id or key_fingerprint(key), key)

    def verify(self, algorithm: str, message: bytes, signature: bytes) -> bool:
        key = self.key
        if algorithm not in algorithms_for(key):
            return False
        try:
            if isinstance(key, ed25519.Ed25519PublicKey):
                key.verify(signature, message)
            elif isinstance(key, ec.EllipticCurvePublicKey):
                if len(signature) != 64:
                    return False
                der = encode_dss_signature(int.from_bytes(signature[:32], "big"), int.from_bytes(signature[32:], "big"))
                key.verify(der, message, ec.ECDSA(hashes.SHA256()))
            elif algorithm == "PS256":
                pss = padding.PSS(mgf=padding.MGF1(hashes.SHA256()), salt_length=padding.PSS.AUTO)
                key.verify(signature, message, pss, hashes.SHA256())
            else:
                key.verify(signature, message, padding.PKCS1v15(), hashes.SHA256())
        except InvalidSignature:
            return False
        return True


@dataclass(frozen=True)
class Verification:
    """What a loader accepts: the configured keys by id and the scope a bundle must be signed for."""

    keys: Mapping[str, VerificationKey]
    scope: str = ""

    @classmethod
    def from_specs(cls, specs: Sequence[str], scope: str | None = None) -> Verification | None:
        """None when no key is given (then a signed bundle is refused, as OPA does)."""
        if not specs:
            if scope:
                raise BundleSignatureError("--verification-scope needs --verification-key", "key_missing")
            return None
        keys: dict[str, VerificationKey] = {}
        for spec in specs:
            key = VerificationKey.load(spec)
            if key.key_id in keys:
                raise BundleSignatureError(f"verification key id {key.key_id} is given twice", "key_invalid")
            keys[key.key_id] = key
        return cls(keys, scope or "")


@dataclass(frozen=True)
class SignatureInfo:
    """A verified signature: who signed, how, for which scope."""

    key_id: str
    algorithm: str
    scope: str

    def to_dict(self) -> JsonDict:
        return {"keyid": self.key_id, "algorithm": self.algorithm, "scope": self.scope}


def signatures_file(
    files: Sequence[tuple[str, bytes]], signer: Signer, *, claims: JsonObject | None = None, scope: str = ""
) -> bytes:
    """The ``.signatures.json`` for ``files`` (name, bytes), signed by ``signer``: same inputs, same bytes.

    Every :class:`~kcp_opa.core.keys.Signer` whose algorithm a public key verifies signs (a PEM
    file, an HSM, a KMS). As OPA: with a claims file its claims replace the ``keyid`` claim (the
    ``kid`` header stays). RS256, ES256 (RFC 6979) and Ed25519 signatures are deterministic; PS256
    salts each signature.
    """
    algorithm = bundle_algorithm(signer)
    listed = [{"name": n, "hash": file_hash(n, c), "algorithm": HASH_ALGORITHM} for n, c in sorted(files)]
    payload: JsonDict = dict(claims) if claims is not None else {"keyid": signer.kid}
    if "files" in payload:
        raise BundleSignatureError("the claims file may not set `files`: the compiler lists them", "claims_invalid")
    if scope:
        payload["scope"] = scope
    payload["files"] = listed
    signing_input = b64url(_json({"alg": algorithm, "kid": signer.kid})) + "." + b64url(_json(payload))
    signature = signer.sign(signing_input.encode("ascii"))
    if strict_b64url(signature) is None:
        raise BundleSignatureError(f"key {signer.kid} returned a signature that is not base64url", "key_invalid")
    return _json({"signatures": [signing_input + "." + signature]})


def _decode_token(raw: bytes, source: str) -> tuple[JsonDict, JsonDict, bytes, bytes]:
    def malformed(why: str) -> BundleSignatureError:
        return BundleSignatureError(f"{source}: {SIGNATURES_NAME} is malformed: {why}", "signatures_malformed")

    try:
        document = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise malformed(f"not JSON ({exc})") from None
    tokens = document.get("signatures") if isinstance(document, dict) else None
    if not isinstance(tokens, list) or len(tokens) != 1 or not isinstance(tokens[0], str):
        raise malformed("expected exactly one JWT in `signatures`")
    parts = tokens[0].split(".")
    if len(parts) != 3:
        raise malformed("the JWT does not have three parts")
    try:
        header, payload = json.loads(b64url_decode(parts[0])), json.loads(b64url_decode(parts[1]))
        signature = b64url_decode(parts[2])
    except (binascii.Error, ValueError) as exc:
        raise malformed(f"the JWT does not decode ({exc})") from None
    if not isinstance(header, dict) or not isinstance(payload, dict):
        raise malformed("the JWT header and payload must be objects")
    return header, payload, f"{parts[0]}.{parts[1]}".encode("ascii"), signature


def verify_members(
    members: Mapping[str, bytes], verification: Verification | None, source: str
) -> SignatureInfo | None:
    """Check the bundle's members against its signature as OPA does; None for an unsigned bundle
    loaded without keys. Every refusal is a :class:`BundleSignatureError` with its own code."""
    signed = SIGNATURES_NAME in members
    if not signed:
        if verification is not None:
            raise BundleSignatureError(
                f"{source}: the bundle is not signed ({SIGNATURES_NAME} missing) but a verification key is configured",
                "unsigned",
            )
        return None
    if verification is None:
        raise BundleSignatureError(
            f"{source}: the bundle is signed but no verification key is configured (--verification-key)",
            "key_not_configured",
        )
    header, payload, signing_input, signature = _decode_token(members[SIGNATURES_NAME], source)
    key_id = header.get("kid") or payload.get("keyid") or ""
    if not isinstance(key_id, str) or not key_id:
        raise BundleSignatureError(f"{source}: the bundle signature names no key id", "key_id_missing")
    key = verification.keys.get(key_id)
    if key is None:
        raise BundleSignatureError(
            f"{source}: signed by key id {key_id!r}, which is not a configured verification key", "unknown_key"
        )
    algorithm = header.get("alg")
    if not isinstance(algorithm, str) or not key.verify(algorithm, signing_input, signature):
        raise BundleSignatureError(
            f"{source}: the bundle signature does not verify under key {key_id!r} ({algorithm})", "signature_invalid"
        )
    scope = payload.get("scope", "")
    if scope != verification.scope:
        raise BundleSignatureError(
            f"{source}: scope mismatch: signed for scope {scope!r}, this loader expects {verification.scope!r}",
            "scope_mismatch",
        )
    _check_files(members, payload.get("files"), source)
    return SignatureInfo(key_id, algorithm, str(scope))


def _check_files(members: Mapping[str, bytes], files: object, source: str) -> None:
    if not isinstance(files, list):
        raise BundleSignatureError(f"{source}: the bundle signature lists no files", "signatures_malformed")
    listed: dict[str, JsonObject] = {}
    for item in files:
        name = item.get("name") if isinstance(item, Mapping) else None
        if not isinstance(name, str) or name in listed:
            raise BundleSignatureError(
                f"{source}: the bundle signature lists a file twice or without a name", "signatures_malformed"
            )
        listed[name] = item
    for name, content in sorted(members.items()):
        if name == SIGNATURES_NAME:
            continue
        entry = listed.pop(name, None)
        if entry is None:
            raise BundleSignatureError(
                f"{source}: {name} is not included in the bundle signature (added after signing)", "file_added"
            )
        if entry.get("algorithm") != HASH_ALGORITHM:
            raise BundleSignatureError(
                f"{source}: {name} is hashed with {entry.get('algorithm')!r}; only SHA-256 is accepted",
                "hash_algorithm",
            )
        try:
            actual = file_hash(name, content)
        except (UnicodeDecodeError, ValueError, RecursionError):
            raise BundleSignatureError(f"{source}: {name} is not valid JSON", "file_modified") from None
        if not hmac.compare_digest(actual, str(entry.get("hash", ""))):
            raise BundleSignatureError(
                f"{source}: {name} does not match its hash in the bundle signature (edited after signing)",
                "file_modified",
            )
    if listed:
        raise BundleSignatureError(
            f"{source}: {sorted(listed)[0]} is listed in the bundle signature but missing (removed after signing)",
            "file_removed",
        )
