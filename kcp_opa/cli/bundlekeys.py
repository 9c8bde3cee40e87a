"""Bundle signing and verification flags, shared by every command that writes or loads a bundle,
and ``kcp-opa bundle verify``. Keys are named by file path or ``pkcs11:`` URI: key material never in argv."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path

import click

from kcp_opa.cli import render
from kcp_opa.cli.options import FILE, FORMAT, file_option, stacked
from kcp_opa.cli.output import as_json, console
from kcp_opa.compile.bundle import LoadedBundle, read_bundle
from kcp_opa.compile.signatures import Verification
from kcp_opa.compile.signkeys import ALGORITHMS, generate_signing_key, load_bundle_signer
from kcp_opa.core.errors import BundleSignatureError
from kcp_opa.core.jsonread import JsonDict
from kcp_opa.core.keys import Signer


def signing_options(command: Callable[..., None]) -> Callable[..., None]:
    """--signing-key, --signing-alg, --signing-key-id, --claims-file, --scope (compile)."""
    return stacked(
        click.option(
            "--signing-key",
            metavar="PEM|URI|KEYRING",
            help="Sign the bundle (.signatures.json in OPA's format) with this key: a PEM private key file (RSA, "
            "EC P-256 or Ed25519), a pkcs11: URI (an Ed25519 key that stays in the HSM, the PIN from pin-source or "
            "$KCP_OPA_PKCS11_PIN) or a keyring file (its Ed25519 signing kid).",
        ),
        click.option(
            "--signing-alg",
            type=click.Choice(ALGORITHMS),
            help="JWS algorithm [default: RS256 for RSA, ES256 for EC, EdDSA for Ed25519].",
        ),
        click.option(
            "--signing-key-id",
            help="The key id (kid) [default: a PEM key's kcp- + 16 hex of its public key's sha256; an HSM key's label]",
        ),
        file_option(
            "--claims-file", help="JSON object of extra claims for the signature payload (as opa build --claims-file)."
        ),
        click.option("--scope", default="", help="The signature's scope claim (a loader must expect the same)."),
    )(command)


def verification_options(command: Callable[..., None]) -> Callable[..., None]:
    """--verification-key (repeatable) and --verification-scope on every command that loads a bundle."""
    command = click.option(
        "--verification-scope", default="", help="The scope the bundle must be signed for [default: none]."
    )(command)
    return click.option(
        "--verification-key",
        "verification_keys",
        multiple=True,
        metavar="[KEYID=]PEM",
        help="Public key a signed bundle must verify under (repeatable); then an unsigned bundle is refused.",
    )(command)


def verification_of(keys: Sequence[str], scope: str) -> Verification | None:
    return Verification.from_specs(keys, scope or None)


def signing_of(
    key: str | None, alg: str | None, key_id: str | None, claims_file: Path | None, scope: str
) -> tuple[Signer | None, JsonDict | None]:
    if key is None:
        if claims_file is not None or scope or alg or key_id:
            raise BundleSignatureError(
                "--signing-alg, --signing-key-id, --claims-file and --scope need --signing-key", "key_missing"
            )
        return None, None
    claims = None
    if claims_file is not None:
        try:
            claims = json.loads(claims_file.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise BundleSignatureError(
                f"{claims_file}: not a readable JSON claims file ({exc})", "claims_invalid"
            ) from None
        if not isinstance(claims, dict):
            raise BundleSignatureError(f"{claims_file}: the claims must be a JSON object", "claims_invalid")
    return load_bundle_signer(key, alg, key_id), claims


def load_verified(path: Path, keys: Sequence[str], scope: str) -> LoadedBundle:
    return read_bundle(path, verification=verification_of(keys, scope))


@click.group()
def bundle() -> None:
    """Bundle provenance: verify a bundle's signature and content as OPA would."""


@bundle.command()
@click.argument("path", type=FILE)
@verification_options
@FORMAT
def verify(path: Path, verification_keys: Sequence[str], verification_scope: str, fmt: str | None) -> None:
    """Verify PATH: every file listed and hashed in its signature, the key and scope as configured.

    Without --verification-key an unsigned bundle passes its own .manifest checks and a signed one
    is refused (as OPA refuses it). Exit 0 verified, 2 refused (one line saying why).
    """
    loaded = load_verified(path, verification_keys, verification_scope)
    document = {
        "ok": True,
        "file": str(path),
        "revision": loaded.revision,
        "sha256": loaded.sha256,
        "signed": loaded.signature is not None,
        "signature": None if loaded.signature is None else loaded.signature.to_dict(),
    }
    if as_json(fmt):
        render.print_json(document)
    else:
        signer = f"signed by {loaded.signer}" if loaded.signer else "unsigned"
        console().print(f"verified {path}: revision {loaded.revision}, sha256 {loaded.sha256}, {signer}", markup=False)


@bundle.command()
@click.argument("path", type=FILE)
@click.option("--alg", type=click.Choice(["EdDSA", "ES256", "RS256"]), default="EdDSA", show_default=True)
def keygen(path: Path, alg: str) -> None:
    """Write a new signing key to PATH (PEM, mode 0600; never overwritten) and its public key to PATH.pub.

    For a demo or a CI secret store; prints the key id bundles signed with it will name.
    """
    key_id = generate_signing_key(path, alg)
    click.echo(f"kcp-opa: wrote {path} and {path}.pub (key id {key_id})", err=True)
