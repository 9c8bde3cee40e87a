"""``GET /v1/proofs/{decision_id}``: a decision's own ledger entries, each with an inclusion proof to a signed tree.

The answer is what an auditor checks offline with ``kcp-opa audit verify-inclusion``: the C2SP
checkpoint of the ledger's Merkle tree (signed now by the service's Ed25519 ledger writer key,
named ``kcp-opa/<ledger_id>``), the log's verifier key, and one inclusion proof per entry of the
decision (the entry inside; the receipts issued on it and their intents, executions and
failures too). Nothing of any other decision is in it. The ledger snapshot is verified first,
every entry against the writer key, as ``audit tree-checkpoint`` does: the service never signs
a tree it would not extend. The log key an auditor trusts is the one they hold apart from the
answer (``audit tree-key``); the one in the answer only names it.
"""

from __future__ import annotations

from kcp_opa.audit.caseproofs import decision_seqs
from kcp_opa.core.errors import CodedError, LedgerError
from kcp_opa.core.jsonread import JsonDict
from kcp_opa.core.keys import ED25519
from kcp_opa.core.signing import Keyring
from kcp_opa.service.callers import AccessDeniedError, Principal, Scope
from kcp_opa.service.desk import GateService
from kcp_opa.trail.ledgertree import LedgerTree
from kcp_opa.trail.note import NoteError, NoteSigner
from kcp_opa.trail.proofs import inclusion_document
from kcp_opa.trail.verify import verify_ledger

PROOFS_ROUTE = "/v1/proofs/{decision_id}"
#: What the route refuses with besides the edge's and authentication's.
PROOF_REFUSALS = ("scope_not_granted", "not_authorized", "no_ledger", "unknown_decision", "store_unavailable")


def decision_proofs(service: GateService, principal: Principal | None, decision_id: str) -> JsonDict:
    """The checkpoint, the log key and the inclusion proofs of ``decision_id``'s entries.

    A ledger that cannot be read now (a database down, a file gone) is 503 ``store_unavailable``,
    never an empty answer.
    """
    try:
        return _proofs(service, principal, decision_id)
    except (LedgerError, NoteError, OSError) as exc:
        if isinstance(exc, CodedError):
            raise
        raise CodedError(f"the ledger cannot be read for proofs now: {exc}", "store_unavailable") from None


def _proofs(service: GateService, principal: Principal | None, decision_id: str) -> JsonDict:
    if principal is None:  # RequireAuth answers first; never served to no one
        raise AccessDeniedError("an authenticated caller with the read scope may read proofs")
    principal.require(Scope.READ, "read a decision's proofs")
    audit = service.gate.audit
    if audit is None:
        raise CodedError("this service has no audit ledger: there is nothing to prove", "no_ledger")
    key = audit.ledger.checkpoint_key
    if key is None or key.alg != ED25519:
        raise CodedError("this service signs no tree checkpoints: start it with an Ed25519 --ledger-key", "no_ledger")
    with audit.ledger.snapshot() as snapshot:
        if snapshot is None:
            raise CodedError(f"no decision {decision_id} in the ledger", "unknown_decision")
        seqs = decision_seqs(snapshot.path, decision_id)
        if not seqs:
            raise CodedError(f"no decision {decision_id} in the ledger", "unknown_decision")
        report = verify_ledger(snapshot.path, keyring=Keyring({key.kid: key}), writer=key.kid)
        if not report.ok:
            found = report.problems[0]
            raise CodedError(f"the ledger does not verify ({found.message}): no proof is signed", "no_ledger")
        tree = LedgerTree.read(snapshot.path, keep=frozenset(seqs))
    signer = NoteSigner(tree.origin, key)
    note, checkpoint = tree.signed_checkpoint(signer), tree.checkpoint()
    return {
        "decision_id": decision_id,
        "checkpoint": note.encode().decode("utf-8"),
        "log_key": signer.verifier().vkey(),
        "proofs": [inclusion_document(tree, seq, checkpoint) for seq in seqs],
    }
