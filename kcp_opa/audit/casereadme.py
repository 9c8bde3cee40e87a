"""The case directory's README: what the case holds and the commands that prove it, as written.

kcp-opa reads a signed bundle only with a verification key, so the case carries the public key
the gatherer verified the bundle with (``keys/bundle.pem``) and every kcp-opa command the README
prints names it, with the key id and the scope the signature was made for. ``opa eval`` loads a
bundle without checking its signature (OPA checks them in ``opa run``, not in ``opa eval``), so
the README says so and prints the ``kcp-opa bundle verify`` that checks it. The README's commands run as written from
inside the case directory; the pinned form names the copies an auditor holds apart from it.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from dataclasses import dataclass

from cryptography.hazmat.primitives import serialization

from kcp_opa.compile.bundle import LoadedBundle
from kcp_opa.compile.signatures import Verification

BUNDLE_KEY = "keys/bundle.pem"
QUERY = "'data.kcp.gate.decision'"


@dataclass(frozen=True)
class BundleKey:
    """The public key a signed bundle verified under, its key id and the scope it was signed for."""

    key_id: str
    algorithm: str
    scope: str
    pem: bytes

    def kcp_flags(self, path: str = BUNDLE_KEY) -> str:
        """kcp-opa's flags: ``--verification-key KEYID=PEM`` (and the scope when signed for one)."""
        flags = f"--verification-key {shlex.quote(f'{self.key_id}={path}')}"
        return flags + (f" --verification-scope {shlex.quote(self.scope)}" if self.scope else "")


def bundle_key(loaded: LoadedBundle, verification: Verification | None) -> BundleKey | None:
    """The key a signed bundle verified under (None for an unsigned bundle)."""
    signature = loaded.signature
    if signature is None or verification is None:
        return None
    key = verification.keys[signature.key_id]  # read_bundle verified under this very key id
    pem = key.key.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    return BundleKey(signature.key_id, signature.algorithm, signature.scope, pem)


def render_readme(
    *,
    decision_id: str,
    ledger_id: str | None,
    created_at: str,
    seqs: Sequence[int],
    seq: int,
    anchored: str,
    pins: str,
    proven: bool,
    bundle: str,
    signed: BundleKey | None,
) -> bytes:
    """``anchored``: how the case is anchored (a sentence); ``pins``: the verify flags that pin its anchor."""
    cut = (
        f"Each entry is proven at its seq in the tree of {seq} entries (`proofs/`); that none of the\n"
        "decision's entries was left out is not shown (a case gathered without --proofs shows it).\n"
        if proven
        else f"The case shows the ledger up to seq {seq} only: `--checkpoint` (a newer checkpoint you hold)\n"
        "or `--expect-head SEQ` makes a case cut before later entries (an execution) fail; gather it\n"
        "again with that `--checkpoint` to anchor it there.\n"
    )
    kcp = f" {signed.kcp_flags()}" if signed else ""
    pinned = f" \\\n        {signed.kcp_flags('bundle-public.pem')}" if signed else ""
    opa_note = (
        "\n`opa eval` does not check a bundle's signature (OPA checks them in `opa run`, not in `opa\n"
        f"eval`); check it first:\n\n    kcp-opa bundle verify {bundle}{kcp}\n"
        if signed
        else ""
    )
    key_note = (
        f"\nThe bundle is signed by `{signed.key_id}` ({signed.algorithm}); `{BUNDLE_KEY}` is the public key it\n"
        "was gathered with. Pin your own copy of it (`bundle-public.pem` below).\n"
        if signed
        else ""
    )
    text = f"""# Case file for decision {decision_id}

Gathered by kcp-opa from ledger `{ledger_id}` on {created_at}: {len(seqs)} entries (seq {", ".join(map(str, seqs))}),
{anchored}.
{key_note}
Prove it (offline; exit 1 and the failing check's name on any failure):

    kcp-opa audit case verify .{kcp}

Pin the trust roots you hold independently of this directory (recommended):

    kcp-opa audit case verify . --trust registry.yaml {pins} \\
        --receipt-keyring receipt-public.json{pinned}

{cut}
Evaluate the final decision yourself, on either engine:

    kcp-opa eval -b {bundle}{kcp} -i input.json {QUERY}
    kcp-opa eval --engine opa -b {bundle}{kcp} -i input.json {QUERY}
    opa eval -b {bundle} -i input.json {QUERY}
{opa_note}
The value must equal `result.json`; `kcp-opa audit case verify` compares the canonical bytes.
"""
    return text.encode("utf-8")
