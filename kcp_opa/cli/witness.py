"""``kcp-opa witness``: cosign a log's tree checkpoints only along one consistent history.

The logic (state, fork and shrink refusal, consistency check) is ``kcp_opa.audit.witness``.
"""

from __future__ import annotations

from pathlib import Path

import click

from kcp_opa.audit.witness import Witness, WitnessRefusal
from kcp_opa.cli import render
from kcp_opa.cli.auditproofs import read_file, read_proof, verifier_key
from kcp_opa.cli.keyarg import signer_from
from kcp_opa.cli.options import FILE, keyring_option, signing_key_option
from kcp_opa.cli.output import EXIT_INVALID, fail
from kcp_opa.core.errors import LedgerError
from kcp_opa.core.files import replace_atomically
from kcp_opa.trail.note import ED25519_COSIGNATURE, ED25519_NOTE, NoteError, NoteSigner

STATE_HELP = "The witness's state file (created 0600): the last checkpoint it cosigned per log."


@click.group()
def witness() -> None:
    """An independent witness: cosigns a log's checkpoint only if it extends the last one it cosigned.

    \b
    kcp-opa witness key --keyring witness-keys.json --name witness.example/w1
    kcp-opa witness cosign ckpt --state w1.state --log-key LOG_VKEY \\
        --keyring witness-keys.json --name witness.example/w1 [--proof consistency.json] -o ckpt.cosigned
    """


def _signer(signing_key: str | None, keyring_path: Path | None, name: str) -> NoteSigner:
    return NoteSigner(name, signer_from(signing_key, keyring_path), ED25519_COSIGNATURE)


name_option = click.option(
    "--name",
    required=True,
    help="The witness's name in its cosignature lines (a schema-less URL, e.g. witness.example/w1).",
)


@witness.command(name="key")
@keyring_option("Keyring whose Ed25519 signing key is the witness's.")
@signing_key_option()
@name_option
def witness_key(keyring_path: Path | None, signing_key: str | None, name: str) -> None:
    """Print the witness's verifier key (type 0x04), for `audit verify-* --witness-key`."""
    try:
        click.echo(_signer(signing_key, keyring_path, name).verifier().vkey())
    except NoteError as exc:
        fail(str(exc), EXIT_INVALID)


@witness.command(name="cosign")
@click.argument("checkpoint", type=FILE)
@click.option("--state", type=FILE, required=True, help=STATE_HELP)
@click.option(
    "--log-key",
    "log_keys",
    multiple=True,
    required=True,
    metavar="VKEY",
    help="A log's verifier key, or a file holding it; repeatable.",
)
@click.option(
    "--proof",
    "proof_path",
    type=FILE,
    help="A consistency proof from the last cosigned checkpoint (`audit prove-consistency`).",
)
@keyring_option("Keyring whose Ed25519 signing key is the witness's.")
@signing_key_option()
@name_option
@click.option("-o", "--output", type=FILE, help="Write the cosigned checkpoint here, not stdout.")
def witness_cosign(
    checkpoint: Path,
    state: Path,
    log_keys: tuple[str, ...],
    proof_path: Path | None,
    keyring_path: Path | None,
    signing_key: str | None,
    name: str,
    output: Path | None,
) -> None:
    """Cosign CHECKPOINT if its log signature verifies and it extends the last one cosigned for its log.

    A checkpoint of the size last cosigned with another root (a fork), or a smaller one (a
    shrinking log), is refused with exit 1 and one line saying so; a larger one needs --proof.
    The first checkpoint of a log is taken on first use.
    """
    try:
        logs = {key.name: key for key in (verifier_key(v, ED25519_NOTE, "--log-key") for v in log_keys)}
        signer = _signer(signing_key, keyring_path, name)
        proof = read_proof(proof_path) if proof_path is not None else None
        done = Witness(state, signer, logs).cosign(read_file(checkpoint, "checkpoint"), proof)
    except WitnessRefusal as exc:
        fail(f"refused: {exc}", EXIT_INVALID)
        return
    except (NoteError, LedgerError) as exc:
        fail(f"{checkpoint}: {exc}", EXIT_INVALID)
        return
    if output is None:
        click.echo(done.note.encode().decode("utf-8"), nl=False)
    else:
        replace_atomically(output, done.note.encode())
    since = "first seen" if done.previous is None else f"extends size {done.previous.size}"
    click.echo(f"cosigned {done.origin} at size {done.size} ({since})", err=True)


@witness.command(name="show")
@click.option("--state", type=FILE, required=True, help=STATE_HELP)
def witness_show(state: Path) -> None:
    """Print the last cosigned size and root per log."""
    try:
        seen = Witness.read_state(state)
    except NoteError as exc:
        fail(str(exc), EXIT_INVALID)
        return
    render.print_json({origin: {"size": s.size, "root": s.root.hex()} for origin, s in sorted(seen.items())})
