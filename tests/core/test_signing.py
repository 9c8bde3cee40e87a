"""Behaviour tests for kcp_opa/core/signing.py that kill its mutmut survivors (docs/testing.md).

Pure Python, no bundle, no process: fast enough for mutmut to run per mutant. Each test pins
an observable effect (a code, a message, a verification result, a file's content), so a
mutant that changes it fails here.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from kcp_opa.core import signing
from kcp_opa.core.errors import KeyringError
from kcp_opa.core.keys import Ed25519Key, HmacKey
from kcp_opa.core.signing import (
    ED25519,
    HMAC_SHA256,
    Keyring,
    generate_ed25519,
    hmac_key,
    hmac_key_from_env,
    load_keyring,
    strict_b64url,
)

SECRET = b"s" * 32
MESSAGE = b"receipt body"


def _code(exc: pytest.ExceptionInfo[KeyringError]) -> str:
    return str(exc.value.code)


def test_constants_are_the_wire_names() -> None:
    assert (HMAC_SHA256, ED25519) == ("HMAC-SHA256", "Ed25519")
    assert signing.ALGORITHMS == ("HMAC-SHA256", "Ed25519")
    assert signing.MIN_SECRET_BYTES == 32
    assert signing.ED25519_SIGNATURE_BYTES == 64


def test_hmac_sign_is_hex_sha256_and_verifies_only_itself() -> None:
    key = hmac_key("k1", SECRET)
    assert key.can_sign
    value = key.sign(MESSAGE)
    assert value == hmac.new(SECRET, MESSAGE, hashlib.sha256).hexdigest()
    assert key.verify(MESSAGE, value)
    assert not key.verify(MESSAGE + b"x", value)
    assert not key.verify(MESSAGE, value.upper())  # only lowercase hex is a signature
    assert not key.verify(MESSAGE, value + "0")
    assert not key.verify(MESSAGE, value[:-1])
    assert not key.verify(MESSAGE, " " + value[1:])


def test_hmac_secret_length_boundary() -> None:
    assert hmac_key("k", b"a" * 32).secret == b"a" * 32
    with pytest.raises(KeyringError) as exc:
        hmac_key("k", b"a" * 31)
    assert _code(exc) == "weak_secret"
    assert str(exc.value) == "HMAC secret for k is 31 bytes; at least 32 are required"


def test_hmac_key_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KYA_RECEIPT_SECRET", "é" * 16)  # 32 UTF-8 bytes
    key = hmac_key_from_env("kid-a")
    assert key.kid == "kid-a" and key.alg == HMAC_SHA256 and key.secret == ("é" * 16).encode("utf-8")
    monkeypatch.setenv("OTHER_VAR", "")
    with pytest.raises(KeyringError) as exc:
        hmac_key_from_env("kid-a", "OTHER_VAR")
    assert _code(exc) == "no_secret"
    assert str(exc.value) == "environment variable OTHER_VAR is not set (it holds the receipt secret)"
    monkeypatch.delenv("KYA_RECEIPT_SECRET")
    with pytest.raises(KeyringError) as exc:
        hmac_key_from_env("kid-a")
    assert "KYA_RECEIPT_SECRET" in str(exc.value)


def test_ed25519_sign_verify_and_public_only() -> None:
    key = generate_ed25519("e1")
    assert key.alg == ED25519 and key.can_sign and key.public_key is not None
    value = key.sign(MESSAGE)
    assert "=" not in value and len(strict_b64url(value) or b"") == 64
    assert key.verify(MESSAGE, value)
    assert not key.verify(MESSAGE + b"!", value)
    public_only = Ed25519Key("e1", public_key=key.public_key)
    assert not public_only.can_sign
    assert public_only.verify(MESSAGE, value)
    private_only = Ed25519Key("e1", private_key=key.private_key)
    assert private_only.verify(MESSAGE, value)  # the public half is derived
    with pytest.raises(KeyringError) as exc:
        public_only.sign(MESSAGE)
    assert _code(exc) == "cannot_sign"
    assert str(exc.value) == "key e1 cannot sign (it holds no secret or private key)"
    # a 63-byte or non-canonical signature never verifies
    raw = strict_b64url(value) or b""
    short = base64.urlsafe_b64encode(raw[:63]).decode("ascii").rstrip("=")
    assert not key.verify(MESSAGE, short)
    assert not key.verify(MESSAGE, value + "=")
    assert not Ed25519Key("x").verify(MESSAGE, value)


def test_strict_b64url_one_spelling() -> None:
    assert strict_b64url("") == b""
    assert strict_b64url("AAAA") == b"\x00\x00\x00"
    assert strict_b64url("_-8") == base64.urlsafe_b64decode("_-8=")
    assert strict_b64url("AA") == b"\x00"
    assert strict_b64url("AB") is None  # non-zero spare bits
    assert strict_b64url("AA==") is None  # padding
    assert strict_b64url("A") is None  # 4n+1 characters
    assert strict_b64url("A+A/") is None  # the other alphabet
    assert strict_b64url("AA AA") is None
    assert strict_b64url("AAAA\n") is None


def test_keyring_signer_and_verifier() -> None:
    active = hmac_key("a", SECRET)
    retired = HmacKey("r", SECRET, retired=True)
    public = Ed25519Key("p", public_key=generate_ed25519("p").public_key)
    ring = Keyring({"a": active, "r": retired, "p": public}, "a")
    assert ring.signer() is active
    assert ring.verifier("a") is active
    assert ring.verifier("r") is None
    assert ring.verifier("nope") is None
    assert ring.verifier("p") is public
    for kid, code in (
        (None, "no_signing_key"),
        ("missing", "no_signing_key"),
        ("r", "cannot_sign"),
        ("p", "cannot_sign"),
    ):
        with pytest.raises(KeyringError) as exc:
            Keyring(ring.keys, kid).signer()
        assert _code(exc) == code
    with pytest.raises(KeyringError) as exc:
        Keyring(ring.keys, "r").signer()
    assert str(exc.value) == "key r is retired or holds no private part"
    with pytest.raises(KeyringError) as exc:
        Keyring(ring.keys, None).signer()
    assert str(exc.value) == "the keyring names no signing key"


def test_public_keyring_drops_secrets_and_private_parts() -> None:
    ed = generate_ed25519("e")
    old = Ed25519Key("o", ed.private_key, ed.public_key, retired=True)
    ring = Keyring({"e": ed, "h": hmac_key("h", SECRET), "o": old, "n": Ed25519Key("n")}, "e")
    pub = ring.public()
    assert pub.signing_kid is None
    assert sorted(pub.keys) == ["e", "o"]
    assert pub.keys["e"].private_key is None and pub.keys["e"].public_key is ed.public_key
    assert pub.keys["e"].alg == ED25519 and pub.keys["e"].kid == "e"
    assert pub.keys["o"].retired and not pub.keys["e"].retired
    assert pub.keys["e"].verify(MESSAGE, ed.sign(MESSAGE))


def test_file_dict_round_trip(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ed = generate_ed25519("e")
    old = generate_ed25519("old")
    old = Ed25519Key("old", old.private_key, old.public_key, retired=True)
    ring = Keyring({"e": ed, "old": old, "h": hmac_key("h", SECRET)}, "e")
    private = ring.to_file_dict(include_private=True)
    assert private["signing_kid"] == "e"
    assert [entry["kid"] for entry in private["keys"]] == ["e", "old"]  # sorted; HMAC never written
    assert private["keys"][0]["alg"] == "Ed25519" and private["keys"][0]["retired"] is False
    assert private["keys"][1]["retired"] is True
    assert set(private["keys"][0]) == {"kid", "alg", "retired", "public_key", "private_key"}
    public = ring.to_file_dict(include_private=False)
    assert public["signing_kid"] is None
    assert all("private_key" not in entry for entry in public["keys"])
    path = tmp_path / "ring.json"
    path.write_text(json.dumps(private), encoding="utf-8")
    loaded = load_keyring(path)
    assert loaded.signing_kid == "e"
    assert loaded.signer().verify(MESSAGE, ed.sign(MESSAGE)) and ed.verify(MESSAGE, loaded.signer().sign(MESSAGE))
    assert loaded.keys["old"].retired and not loaded.keys["e"].retired
    path.write_text(json.dumps(public), encoding="utf-8")
    verify_only = load_keyring(path)
    assert verify_only.signing_kid is None and not verify_only.keys["e"].can_sign
    assert verify_only.keys["e"].verify(MESSAGE, ed.sign(MESSAGE))
    # an HMAC entry reads its secret from the named variable, and keeps its retired flag
    monkeypatch.setenv("RING_SECRET", "x" * 40)
    path.write_text(
        json.dumps(
            {
                "signing_kid": 7,
                "keys": [{"kid": "h", "alg": "HMAC-SHA256", "secret_env": "RING_SECRET", "retired": True}],
            }
        ),
        encoding="utf-8",
    )
    hring = load_keyring(path)
    assert hring.signing_kid is None
    assert hring.keys["h"].secret == b"x" * 40 and hring.keys["h"].retired and hring.keys["h"].alg == HMAC_SHA256
    assert hring.keys["h"].kid == "h"


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ("not json", "keyring is not JSON"),
        ("[]", "a keyring is {'signing_kid': kid, 'keys': [...]}"),
        ('{"keys": {}}', "a keyring is {'signing_kid': kid, 'keys': [...]}"),
        ('{"keys": [1]}', "each key needs a kid and alg (HMAC-SHA256 or Ed25519)"),
        ('{"keys": [{"kid": 1, "alg": "Ed25519"}]}', "each key needs a kid and alg"),
        ('{"keys": [{"kid": "a", "alg": "RS256"}]}', "each key needs a kid and alg"),
        ('{"keys": [{"kid": "a", "alg": "HMAC-SHA256"}]}', "HMAC key a must name its secret with secret_env"),
        ('{"keys": [{"kid": "a", "alg": "Ed25519"}]}', "Ed25519 key a has neither public_key nor private_key"),
        ('{"keys": [{"kid": "a", "alg": "Ed25519", "public_key": "@@"}]}', "a public_key is not base64"),
        ('{"keys": [{"kid": "a", "alg": "Ed25519", "public_key": "AAAA"}]}', "a public_key is not a raw Ed25519 key"),
        ('{"keys": [{"kid": "a", "alg": "Ed25519", "private_key": "AAAA"}]}', "a private_key is not a raw Ed25519 key"),
        ('{"keys": [{"kid": "a", "alg": "Ed25519", "private_key": "é"}]}', "a private_key is not base64"),
    ],
)
def test_malformed_keyrings(tmp_path: Path, document: str, message: str) -> None:
    path = tmp_path / "ring.json"
    path.write_text(document, encoding="utf-8")
    with pytest.raises(KeyringError) as exc:
        load_keyring(path)
    assert _code(exc) == "malformed_key"
    # _unb64's "not base64" names the key but not the file (the other messages name both)
    assert str(exc.value).startswith(f"{path}: ") or message.endswith("is not base64")
    assert message in str(exc.value)


def test_duplicate_kid_and_missing_file(tmp_path: Path) -> None:
    raw = base64.b64encode(generate_ed25519("a").public_key.public_bytes_raw()).decode()  # type: ignore[union-attr]
    path = tmp_path / "ring.json"
    entry = {"kid": "a", "alg": "Ed25519", "public_key": raw}
    path.write_text(json.dumps({"keys": [entry, entry]}), encoding="utf-8")
    with pytest.raises(KeyringError) as exc:
        load_keyring(path)
    assert _code(exc) == "malformed_key" and str(exc.value) == f"{path}: kid a appears twice"
    with pytest.raises(KeyringError) as exc:
        load_keyring(tmp_path / "absent.json")
    assert _code(exc) == "no_keyring"
    assert str(exc.value).startswith(f"{tmp_path / 'absent.json'}: cannot read keyring: ")
    assert "No such file" in str(exc.value)


def test_private_and_public_entry_must_agree_on_the_public_half(tmp_path: Path) -> None:
    one, other = Ed25519PrivateKey.generate(), generate_ed25519("b")
    priv = base64.b64encode(one.private_bytes_raw()).decode()
    pub = base64.b64encode(other.public_key.public_bytes_raw()).decode()  # type: ignore[union-attr]
    path = tmp_path / "ring.json"
    path.write_text(json.dumps({"signing_kid": "a", "keys": [{"kid": "a", "alg": "Ed25519", "private_key": priv}]}))
    key = load_keyring(path).signer()
    assert key.public_key is not None and key.verify(MESSAGE, key.sign(MESSAGE))
    # an explicit public_key is the one verification uses
    path.write_text(json.dumps({"keys": [{"kid": "a", "alg": "Ed25519", "private_key": priv, "public_key": pub}]}))
    mixed = load_keyring(path).keys["a"]
    assert mixed.verify(MESSAGE, other.sign(MESSAGE))


def test_small_edges_mutmut_found() -> None:
    """Each line here killed one mutmut survivor (docs/testing.md, Python mutation testing)."""
    assert generate_ed25519("named").kid == "named"
    # "AAAX" is canonical (X's spare bits are zero): stripping more than "=" would refuse it
    assert strict_b64url("AAAX") == base64.urlsafe_b64decode("AAAX")
    # an Ed25519 entry without key material is written without it (no crash); an HMAC one never
    odd = {
        "n": Ed25519Key("n"),
        "h": HmacKey("h", SECRET),
    }
    assert Keyring(odd, "n").to_file_dict(include_private=True)["keys"] == [
        {"kid": "n", "alg": "Ed25519", "retired": False}
    ]


def test_keyring_messages_name_the_key_and_the_os_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SHORT_SECRET", "x" * 8)
    path = tmp_path / "ring.json"
    path.write_text(json.dumps({"keys": [{"kid": "hk", "alg": "HMAC-SHA256", "secret_env": "SHORT_SECRET"}]}))
    with pytest.raises(KeyringError) as exc:
        load_keyring(path)
    assert _code(exc) == "weak_secret" and str(exc.value) == "HMAC secret for hk is 8 bytes; at least 32 are required"
    with pytest.raises(KeyringError) as exc:
        load_keyring(tmp_path / "absent.json")
    assert str(exc.value) == f"{tmp_path / 'absent.json'}: cannot read keyring: No such file or directory"
