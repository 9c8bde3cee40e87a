"""One error root for everything kcp-opa raises on purpose.

Callers catch :class:`KcpOpaError`; the CLI turns it into a one-line message and an exit code.
Anything else escaping is a bug.
"""

from __future__ import annotations


class KcpOpaError(Exception):
    """Root of every deliberate kcp-opa failure."""

    #: The seq of the ledger entry that already records this refusal (None: none does); a layer
    #: above that records it too links to it (``refusal_seq``): one refusal is counted once.
    ledger_seq: int | None = None


class SourceError(KcpOpaError):
    """A YAML source cannot be read as data at all (not UTF-8, not YAML, too big, a bomb...)."""

    def __init__(self, file: str, message: str, line: int | None = None) -> None:
        self.file = file
        self.line = line
        self.reason = message
        where = f"{file}:{line}" if line else file
        super().__init__(f"{where}: {message}")


class SourceUnreadableError(SourceError):
    """The file could not be opened or read (missing, permission, a directory): an I/O error."""


class ValidationFailedError(KcpOpaError):
    """A manifest or matrix was read but breaks the rules; ``report`` says which."""

    def __init__(self, file: str, errors: list[str]) -> None:
        self.file = file
        self.errors = errors
        first = errors[0] if errors else "invalid"
        more = f" (+{len(errors) - 1} more)" if len(errors) > 1 else ""
        super().__init__(f"{first}{more}")


class UnitNotFoundError(KcpOpaError):
    """A unit id asked for by name does not exist in the manifest."""


class CompileError(KcpOpaError):
    """Inputs are valid on their own but cannot be compiled together into one bundle."""


class ManifestIntegrityError(KcpOpaError):
    """A manifest's declared content_integrity (hash or signature) does not hold: never compiled."""


class BundleError(KcpOpaError):
    """A bundle on disk is missing, malformed or inconsistent with its own .manifest."""


class ActionRejectedError(KcpOpaError):
    """An action intent is not a valid, safe-to-evaluate action; nothing was evaluated.

    ``path`` is where in the action the problem sits (JSON-pointer style, "" for the root).
    """

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        where = f"action{path}" if path else "action"
        super().__init__(f"{where}: {reason}")


class EngineLoadError(BundleError):
    """regopy cannot load, plan or safely host a bundle's policies."""


class AnalysisError(KcpOpaError):
    """prove/diff/pin cannot run: unreadable invariants, a ledger without that decision..."""


class BundleSignatureError(BundleError):
    """A bundle's ``.signatures.json`` does not hold for the keys and scope configured; ``code`` says how."""

    def __init__(self, message: str, code: str) -> None:
        self.code = code
        super().__init__(message)


class BundleProvenanceError(BundleError):
    """A bundle is not the one an archived entry names (its sha256 differs): never replayed against."""


class QueryError(KcpOpaError):
    """An ad-hoc query (``kcp-opa eval``) could not be evaluated."""


class CodedError(KcpOpaError):
    """A refusal with a stable machine-readable ``code`` (CLI: {"ok": false, "error", "code"})."""

    code = "error"

    def __init__(self, message: str, code: str | None = None) -> None:
        if code is not None:
            self.code = code
        super().__init__(message)


class EvidenceRejectedError(CodedError):
    """A control result that may not be recorded (wrong actor, self-approval, wrong action...)."""


class ReceiptIssueError(CodedError):
    """A receipt cannot be issued for this decision (not approved, a hold stands, controls missing)."""


class ReceiptVerificationError(CodedError):
    """A receipt failed verification; ``code`` names the first check that failed."""


class KeyringError(CodedError):
    """A signing or verification key is missing, malformed, too short or retired."""

    code = "key_error"


class ExecutionError(CodedError):
    """The executor refused or could not complete an action."""


class StoreError(CodedError):
    """A store failed (any backend: kcp_opa.stores); nothing was consumed or executed (fail closed)."""

    code = "store_unavailable"


class StoreUnavailableError(StoreError):
    """The database behind a store or the ledger cannot be reached or written now (down, failing,
    read-only, its pool exhausted): a fault, never a policy answer. Nothing was decided, consumed
    or executed; retry later (the service answers 503 ``store_unavailable``, the CLI exits 5)."""


class LedgerError(KcpOpaError):
    """The audit ledger cannot be written or read; a decision that needed it fails closed."""


class LedgerUnavailableError(StoreUnavailableError, LedgerError):
    """The ledger's database is unavailable: :class:`Gate.decide` raises it (no decision was
    recorded, so none is returned) instead of answering a DENY built from the outage."""


class MalformedDocumentError(CodedError):
    """A signed document (receipt, attestation, checkpoint) read strictly does not have its shape:
    an unknown or missing field, or a field of the wrong type; ``code`` is ``malformed_<kind>``."""

    code = "malformed_document"
