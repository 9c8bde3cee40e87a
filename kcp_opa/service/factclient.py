"""The issuer's client for ``POST /v1/facts`` (``kcp-opa facts post``): one signed attestation to a
running gate, with the issuer's bearer token from the environment (never argv).

A refusal comes back as the gate's own ``{"error", "code"}`` in one line; a gate that cannot be
reached, or answers something that is not JSON, is said as such. Nothing is retried: a fact the
gate refused is refused again until the issuer signs a good one.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from urllib.parse import urlsplit

from kcp_opa.core import strictjson
from kcp_opa.core.errors import CodedError
from kcp_opa.core.jsonread import JsonDict, JsonObject

TIMEOUT_S = 30.0


class FactPostError(CodedError):
    """The gate refused the attestation (its code), or could not be asked (``gate_unreachable``)."""

    code = "gate_unreachable"


def post_fact_to(origin: str, token: str, attestation: JsonObject) -> JsonDict:
    """POST ``attestation`` to ``origin``/v1/facts as the bearer of ``token``; what the gate kept."""
    parts = urlsplit(origin)
    if parts.scheme not in {"http", "https"} or not parts.netloc or parts.path not in {"", "/"}:
        raise FactPostError(f"--url {origin[:200]!r}: the gate's origin, e.g. http://127.0.0.1:8181", "usage")
    if not token:
        raise FactPostError(
            "no bearer token: put the issuer's token in the environment variable --token-env names", "usage"
        )
    request = urllib.request.Request(  # noqa: S310 - the scheme is checked above
        f"{parts.scheme}://{parts.netloc}/v1/facts",
        data=json.dumps(dict(attestation)).encode("utf-8"),
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:  # noqa: S310
            return _answer(response.read(), response.status)
    except urllib.error.HTTPError as refused:
        answer = _answer(refused.read(), refused.code)
        code = str(answer.get("code") or "refused")
        raise FactPostError(
            f"the gate refused the fact ({refused.code} {code}): {answer.get('error', '')}", code
        ) from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise FactPostError(f"cannot reach the gate at {parts.netloc}: {reason}") from None


def _answer(raw: bytes, status: int) -> JsonDict:
    try:
        value = strictjson.loads(raw)
    except ValueError:
        value = None
    if not isinstance(value, dict):
        raise FactPostError(f"the gate answered {status} with something that is not a JSON object")
    return value
