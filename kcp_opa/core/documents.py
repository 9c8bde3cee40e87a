"""Strict reading of the signed documents (receipts, attestations, checkpoints): one reader.

Each document is a frozen dataclass with one ``from_dict`` (through :class:`Fields`: an unknown
or missing field, or a field of the wrong type, is a :class:`MalformedDocumentError`) and one
``to_dict`` that gives back the wire form key for key, so a signature over the canonical JSON of
what was read still verifies. What comes from JSON is an ``object`` until a field is checked.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Protocol, Self, TypeVar

from kcp_opa.core.errors import MalformedDocumentError
from kcp_opa.core.jsonread import JsonDict
from kcp_opa.core.keys import Signer, signed_bytes


class SignedDocument(Protocol):
    """A typed document with a signature block: what :func:`sign` signs."""

    def to_dict(self) -> JsonDict: ...

    def with_signature(self, signature: Signature) -> Self: ...


Document = TypeVar("Document", bound=SignedDocument)


def sign(document: Document, key: Signer) -> Document:
    """``document`` signed by ``key`` over its wire form with only ``signature.value`` left out
    (``alg`` and ``kid`` are signed too), as every signed document always was."""
    draft = document.with_signature(Signature(key.alg, key.kid, ""))
    return draft.with_signature(Signature(key.alg, key.kid, key.sign(signed_bytes(draft.to_dict()))))


@dataclass(frozen=True)
class Signature:
    """``{alg, kid, value}``: the signature block every signed document carries."""

    alg: str
    kid: str
    value: str

    @classmethod
    def from_dict(cls, raw: object, kind: str = "document") -> Signature:
        fields = Fields(raw, kind, required=("alg", "kid", "value"), where="signature")
        return cls(alg=fields.text("alg"), kid=fields.text("kid"), value=fields.text("value"))

    def to_dict(self) -> dict[str, str]:
        return {"alg": self.alg, "kid": self.kid, "value": self.value}


class Fields:
    """A JSON object read field by field; every refusal is one ``malformed_<kind>`` error."""

    def __init__(
        self,
        raw: object,
        kind: str,
        *,
        required: Collection[str],
        optional: Collection[str] = (),
        where: str = "",
    ) -> None:
        self.kind, self.where = kind, f"{kind} {where}".strip()
        if not isinstance(raw, Mapping) or not all(isinstance(key, str) for key in raw):
            raise self.error(f"a {self.where} is a JSON object")
        unknown = sorted(set(raw) - set(required) - set(optional))
        if unknown:
            raise self.error(f"{self.where} has unknown fields: {', '.join(unknown)}")
        missing = [name for name in required if name not in raw]
        if missing:
            raise self.error(f"{self.where} lacks {', '.join(missing)}")
        self.raw: Mapping[str, object] = raw

    def error(self, message: str) -> MalformedDocumentError:
        return MalformedDocumentError(message, f"malformed_{self.kind}")

    def _wrong(self, name: str, expected: str) -> MalformedDocumentError:
        return self.error(f"{self.where} field {name} must be {expected}")

    def text(self, name: str, *, nonempty: bool = False) -> str:
        value = self.raw[name]
        if not isinstance(value, str) or (nonempty and not value):
            raise self._wrong(name, "a non-empty string" if nonempty else "a string")
        return value

    def optional_text(self, name: str) -> str | None:
        """A string or null; an absent optional field reads as None."""
        value = self.raw.get(name)
        if value is not None and not isinstance(value, str):
            raise self._wrong(name, "a string or null")
        return value

    def integer(self, name: str, *, minimum: int | None = None) -> int:
        value = self.raw[name]
        if isinstance(value, bool) or not isinstance(value, int) or (minimum is not None and value < minimum):
            raise self._wrong(name, "an integer" if minimum is None else f"an integer >= {minimum}")
        return value

    def flag(self, name: str) -> bool:
        value = self.raw[name]
        if not isinstance(value, bool):
            raise self._wrong(name, "true or false")
        return value

    def strings(self, name: str) -> tuple[str, ...]:
        value = self.raw[name]
        if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
            raise self._wrong(name, "a list of strings")
        return tuple(value)

    def signature(self, name: str = "signature") -> Signature:
        return Signature.from_dict(self.raw[name], self.kind)
