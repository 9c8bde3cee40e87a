"""Decision documents as files: signed by the gate that wrote them, verified before a receipt.

A KYA decision document (``kcp-opa controls show --decision-out``) is what ``kcp-opa receipt
issue`` signs a receipt for, and anyone can write one: an APPROVED status, registered approvers,
PASSED controls bound to the right ids. Its bindings prove nothing about who wrote it. So the
desk signs the document it writes (``signature {alg, kid, value}`` over its canonical JSON
without ``signature.value``, the form other gates' documents carry) and ``receipt issue``
verifies that signature with the gate's key before it reads anything else. A document nobody
authenticated is taken only when the operator says so (``accept_unsigned``), and the receipt
then carries ``decision_authentication: unsigned``, signed with the rest.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping

from kcp_opa.authorize.documents import Receipt
from kcp_opa.authorize.receipts import issue_for_checked_decision
from kcp_opa.core.errors import ReceiptIssueError
from kcp_opa.core.jsonread import JsonDict, JsonObject
from kcp_opa.core.signing import ALGORITHMS, Keyring, Signer, document_verifies, sign_document

__all__ = ["check_decision_signature", "issue_for_gate_document", "sign_decision_document"]


def sign_decision_document(document: JsonObject, signer: Signer) -> JsonDict:
    """``document`` signed by the gate that wrote it (a signature already there is replaced)."""
    return sign_document({k: v for k, v in document.items() if k != "signature"}, signer)


def check_decision_signature(document: JsonObject, keys: Keyring) -> None:
    """Refuse (:class:`ReceiptIssueError`) unless ``document`` carries a signature that verifies
    with a key in ``keys`` that is not retired, under the algorithm that key has."""
    signature = document.get("signature")
    if signature is None:
        raise ReceiptIssueError(
            "the decision document carries no signature: a gate's decision is signed by the gate that wrote it",
            "unsigned_decision",
        )
    if not isinstance(signature, Mapping) or not isinstance(signature.get("value"), str):
        raise ReceiptIssueError("the decision document's signature is malformed", "bad_signature")
    kid, alg = signature.get("kid"), signature.get("alg")
    key = keys.verifier(kid) if isinstance(kid, str) and alg in ALGORITHMS else None
    if key is None or key.alg != alg:
        raise ReceiptIssueError(f"no {alg} decision key {kid!r} in the keyring given", "unknown_decision_key")
    if not document_verifies(document, key):
        raise ReceiptIssueError(
            "the decision document's signature does not verify: it was edited, or signed by another key",
            "bad_signature",
        )


def issue_for_gate_document(
    document: JsonObject,
    action: JsonObject,
    key: Signer,
    *,
    decision_keys: Keyring | None,
    accept_unsigned: bool = False,
    ttl_seconds: int | None = None,
    now: dt.datetime | None = None,
) -> Receipt:
    """A receipt for a decision document this deployment's gate wrote and signed.

    With ``decision_keys`` the document's signature must verify with one of them (an unsigned,
    edited or foreign document is refused); without, only ``accept_unsigned`` lets it through,
    and the receipt says ``decision_authentication: unsigned``. Giving both is refused: a key
    says the document must be signed, the flag says it need not be.
    """
    if decision_keys is not None and accept_unsigned:
        raise ReceiptIssueError("give --decision-key or --accept-unsigned-decision, not both", "usage")
    if decision_keys is None and not accept_unsigned:
        raise ReceiptIssueError(
            "the decision document is not authenticated: give --decision-key KEYRING (the key of the gate that"
            " wrote it), or --accept-unsigned-decision to take it on your word (the receipt then says so)",
            "unauthenticated_decision",
        )
    if decision_keys is not None:
        check_decision_signature(document, decision_keys)
    return issue_for_checked_decision(
        document, action, key, ttl_seconds=ttl_seconds, now=now, unsigned_decision=decision_keys is None
    )
