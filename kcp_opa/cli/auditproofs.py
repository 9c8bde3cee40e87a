"""``audit tree-checkpoint``, ``tree-key``, ``prove-inclusion``, ``prove-consistency`` and their verifiers.

The ledger's Merkle tree (``kcp_opa.trail.ledgertree``) is signed as a C2SP checkpoint; proofs
are JSON files; the verifiers need only the proof, the checkpoint(s) and the verifier keys, never
the ledger. Any failed check is one line and exit 1.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from functools import wraps
from pathlib import Path
from typing import ParamSpec

import click

from kcp_opa.cli import render
from kcp_opa.cli.keyarg import signer_from
from kcp_opa.cli.ledgerarg import LEDGER, ledger_line
from kcp_opa.cli.options import FILE, keyring_option, signing_key_option, stacked
from kcp_opa.cli.output import EXIT_INVALID, EXIT_USAGE, fail
from kcp_opa.core.errors import LedgerError
from kcp_opa.core.files import read_regular, replace_atomically
from kcp_opa.core.signing import Keyring, load_keyring
from kcp_opa.core.strictjson import loads
from kcp_opa.trail.ledgertree import LedgerTree, ledger_id_of, origin_for
from kcp_opa.trail.note import (
    ED25519_COSIGNATURE,
    ED25519_NOTE,
    Checkpoint,
    Note,
    NoteError,
    NoteSigner,
    NoteVerifier,
    Verified,
    open_checkpoint,
)
from kcp_opa.trail.proofs import (
    consistency_document,
    inclusion_document,
    verify_consistency_document,
    verify_inclusion_document,
)
from kcp_opa.trail.verify import verify_ledger

MAX_PROOF_BYTES = 16 * 1024 * 1024
P = ParamSpec("P")


def refusals(command: Callable[P, None]) -> Callable[P, None]:
    """A check that fails is one line and exit 1 (not a usage error)."""

    @wraps(command)
    def run(*args: P.args, **kwargs: P.kwargs) -> None:
        try:
            command(*args, **kwargs)
        except (NoteError, LedgerError) as exc:
            fail(str(exc), EXIT_INVALID)

    return run


def read_file(path: Path, what: str) -> bytes:
    try:
        data = read_regular(path, MAX_PROOF_BYTES)
    except OSError as exc:
        fail(f"{path}: cannot read the {what}: {exc.strerror or exc}", EXIT_USAGE)
        raise  # pragma: no cover - fail exits
    if len(data) > MAX_PROOF_BYTES:
        fail(f"{path}: the {what} is larger than {MAX_PROOF_BYTES} bytes; not reading it", EXIT_INVALID)
    return data


def verifier_key(value: str, kind: int, what: str) -> NoteVerifier:
    """A verifier key given as ``NAME+ID+KEY`` or as a file holding one."""
    text = value
    if "+" not in value or Path(value).is_file():
        text = read_file(Path(value), what).decode("utf-8", "replace")
    verifier = NoteVerifier.from_vkey(text)
    if verifier.kind != kind:
        wanted = "a log key (type 0x01)" if kind == ED25519_NOTE else "a witness cosignature key (type 0x04)"
        raise NoteError(f"{what} {verifier.name} is not {wanted}")
    return verifier


def write_output(output: Path | None, content: bytes) -> None:
    if output is None:
        click.echo(content.decode("utf-8"), nl=False)
    else:
        replace_atomically(output, content)


def unsigned(path: Path) -> Checkpoint:
    """A checkpoint's content, signature unchecked (a prover checks it against the ledger instead)."""
    return Checkpoint.from_text(Note.parse(read_file(path, "checkpoint")).text)


def opened(path: Path, log_key: str, witness_keys: Sequence[str], witnesses: int) -> Verified:
    """The checkpoint at ``path`` with its log signature and ``witnesses`` cosignatures verified."""
    log = verifier_key(log_key, ED25519_NOTE, "--log-key")
    keys = [verifier_key(w, ED25519_COSIGNATURE, "--witness-key") for w in witness_keys]
    if witnesses > len(keys):
        raise click.UsageError(f"--witnesses {witnesses} needs at least {witnesses} --witness-key")
    try:
        return open_checkpoint(read_file(path, "checkpoint"), log, keys, witnesses)
    except NoteError as exc:
        raise NoteError(f"{path}: {exc}") from None


def read_proof(path: Path) -> object:
    try:
        return loads(read_file(path, "proof"))
    except ValueError as exc:  # json.JSONDecodeError, StrictJSONError
        raise NoteError(f"{path}: not a JSON proof: {exc}") from None


checkpoint_options = stacked(
    click.option(
        "--log-key",
        required=True,
        metavar="VKEY",
        help="The log's verifier key, or a file holding it (`audit tree-key`).",
    ),
    click.option(
        "--witness-key",
        "witness_keys",
        multiple=True,
        metavar="VKEY",
        help="A witness's verifier key, or a file holding it (`witness key`); repeatable.",
    ),
    click.option(
        "--witnesses",
        type=click.IntRange(min=0),
        default=0,
        show_default=True,
        help="How many of the --witness-key witnesses must have cosigned the checkpoint.",
    ),
)


def _log_signer(signing_key: str | None, keyring_path: Path | None, origin: str) -> NoteSigner:
    return NoteSigner(origin, signer_from(signing_key, keyring_path))


@click.command(name="tree-key")
@click.argument("ledger", type=LEDGER)
@keyring_option("Keyring whose Ed25519 signing key signs the ledger's tree checkpoints.")
@signing_key_option()
@click.option("--origin", help="The tree's name (default kcp-opa/<ledger_id>); the same as given to tree-checkpoint.")
@refusals
def tree_key(ledger: Path, keyring_path: Path | None, signing_key: str | None, origin: str | None) -> None:
    """Print the log verifier key (NAME+ID+KEY) that auditors and witnesses check checkpoints with."""
    named = origin_for(ledger_id_of(ledger), origin)
    click.echo(_log_signer(signing_key, keyring_path, named).verifier().vkey())


@click.command(name="tree-checkpoint")
@click.argument("ledger", type=LEDGER)
@keyring_option("Keyring whose Ed25519 signing key (the ledger's writer) signs the checkpoint.")
@signing_key_option()
@click.option("--origin", help="Name the tree (default kcp-opa/<ledger_id>; needed for a headerless ledger).")
@click.option("--allow-unbound", is_flag=True, help="Sign the tree of a ledger whose header names no writer.")
@click.option("-o", "--output", type=FILE, help="Write here, not stdout.")
@refusals
def tree_checkpoint(
    ledger: Path,
    keyring_path: Path | None,
    signing_key: str | None,
    origin: str | None,
    allow_unbound: bool,
    output: Path | None,
) -> None:
    """Sign a C2SP checkpoint (origin, size, root hash) of a verified ledger's Merkle tree.

    The ledger is verified first as `audit checkpoint` does (the writer's own ledger only,
    every entry signed by it). Leaves are the entries' stored canonical bytes, seq 1 first.
    Give auditors the key from `audit tree-key`; witnesses cosign with `kcp-opa witness cosign`.
    """
    key = signer_from(signing_key, keyring_path)
    report = verify_ledger(
        ledger, keyring=Keyring({key.kid: key}), writer=None if allow_unbound else key.kid, allow_unbound=allow_unbound
    )
    if not report.ok:
        problem = report.problems[0]
        fail(f"{ledger_line(ledger, problem.line)}: {problem.message}; not signing it", EXIT_INVALID)
    tree = LedgerTree.read(ledger, origin)
    if tree.tree.size != report.entries:
        fail(f"{ledger}: changed while it was read; run the command again", EXIT_INVALID)
    write_output(output, tree.signed_checkpoint(NoteSigner(tree.origin, key)).encode())


@click.command(name="prove-inclusion")
@click.argument("ledger", type=LEDGER)
@click.argument("seq", type=click.IntRange(min=1))
@click.option("--checkpoint", "checkpoint_path", type=FILE, required=True, help="The tree checkpoint to prove against.")
@click.option("--origin", help="The tree's name, when the checkpoint was made with --origin.")
@click.option("-o", "--output", type=FILE, help="Write the proof here, not stdout.")
@refusals
def prove_inclusion(ledger: Path, seq: int, checkpoint_path: Path, origin: str | None, output: Path | None) -> None:
    """Write the proof (JSON, the entry inside) that entry SEQ is in the checkpoint's tree.

    Refused when the ledger's first entries no longer hash to the checkpoint's root (an entry
    edited, removed or moved since). Check it with `audit verify-inclusion`, without the ledger.
    """
    checkpoint = unsigned(checkpoint_path)
    tree = LedgerTree.read(ledger, origin, keep=frozenset({seq}))
    document = inclusion_document(tree, seq, checkpoint)
    write_output(output, (json.dumps(document, indent=2, ensure_ascii=False) + "\n").encode("utf-8"))


@click.command(name="prove-consistency")
@click.argument("ledger", type=LEDGER)
@click.argument("old", type=FILE)
@click.argument("new", type=FILE)
@click.option("--origin", help="The tree's name, when the checkpoints were made with --origin.")
@click.option("-o", "--output", type=FILE, help="Write the proof here, not stdout.")
@refusals
def prove_consistency(ledger: Path, old: Path, new: Path, origin: str | None, output: Path | None) -> None:
    """Write the proof (JSON) that checkpoint OLD's tree is a prefix of checkpoint NEW's.

    What a witness needs to cosign NEW after OLD; check it with `audit verify-consistency`.
    """
    tree = LedgerTree.read(ledger, origin)
    document = consistency_document(tree, unsigned(old), unsigned(new))
    write_output(output, (json.dumps(document, indent=2) + "\n").encode("utf-8"))


@click.command(name="verify-inclusion")
@click.argument("proof", type=FILE)
@click.option("--checkpoint", "checkpoint_path", type=FILE, required=True, help="The checkpoint the proof is for.")
@checkpoint_options
@keyring_option("The writer's public keys: with --writer, the entry's writer signature must verify.")
@click.option("--writer", help="The writer kid whose signature the entry must carry. Needs --keyring.")
@refusals
def verify_inclusion_command(
    proof: Path,
    checkpoint_path: Path,
    log_key: str,
    witness_keys: tuple[str, ...],
    witnesses: int,
    keyring_path: Path | None,
    writer: str | None,
) -> None:
    """Check an inclusion proof offline: the entry it carries is at its seq in the signed tree.

    Needs only the proof, the checkpoint and the keys: the log's signature must verify, and
    --witnesses K of the --witness-key witnesses must have cosigned it; with --keyring and
    --writer, the entry must carry the writer's valid signature. Exit 1 otherwise.
    """
    if (writer is None) != (keyring_path is None):
        raise click.UsageError("--writer and --keyring go together (the writer's kid and its public key)")
    keyring = load_keyring(keyring_path) if keyring_path is not None else None
    verified = opened(checkpoint_path, log_key, witness_keys, witnesses)
    entry = verify_inclusion_document(read_proof(proof), verified.checkpoint, keyring, writer)
    render.print_json(
        {
            "ok": True,
            "origin": verified.checkpoint.origin,
            "tree_size": verified.checkpoint.size,
            "seq": entry.get("seq"),
            "type": entry.get("type"),
            "decision_id": entry.get("decision_id"),
            "entry_hash": entry.get("entry_hash"),
            "cosigned_by": sorted(verified.cosigned),
            "writer": writer,
        }
    )


@click.command(name="verify-consistency")
@click.argument("proof", type=FILE)
@click.option("--old", "old_path", type=FILE, required=True, help="The older checkpoint.")
@click.option("--new", "new_path", type=FILE, required=True, help="The newer checkpoint.")
@checkpoint_options
@refusals
def verify_consistency_command(
    proof: Path, old_path: Path, new_path: Path, log_key: str, witness_keys: tuple[str, ...], witnesses: int
) -> None:
    """Check offline that --new's tree extends --old's (the log did not fork or rewrite history)."""
    old = opened(old_path, log_key, witness_keys, witnesses)
    new = opened(new_path, log_key, witness_keys, witnesses)
    verify_consistency_document(read_proof(proof), old.checkpoint, new.checkpoint)
    render.print_json(
        {"ok": True, "origin": new.checkpoint.origin, "old_size": old.checkpoint.size, "new_size": new.checkpoint.size}
    )


@click.command(name="verify-checkpoint")
@click.argument("checkpoint_path", metavar="CHECKPOINT", type=FILE)
@checkpoint_options
@refusals
def verify_checkpoint_command(
    checkpoint_path: Path, log_key: str, witness_keys: tuple[str, ...], witnesses: int
) -> None:
    """Check a tree checkpoint's log signature and, with --witnesses K, K witness cosignatures."""
    verified = opened(checkpoint_path, log_key, witness_keys, witnesses)
    render.print_json(
        {
            "ok": True,
            "origin": verified.checkpoint.origin,
            "tree_size": verified.checkpoint.size,
            "cosigned_by": verified.cosigned,
        }
    )


COMMANDS = (
    tree_key,
    tree_checkpoint,
    prove_inclusion,
    prove_consistency,
    verify_inclusion_command,
    verify_consistency_command,
    verify_checkpoint_command,
)
