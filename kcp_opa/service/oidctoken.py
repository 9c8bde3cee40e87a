"""The identity provider's keys and the ID token check: what makes a sign-on believable.

An ID token is believed only when every one of these holds: its algorithm is RS256 or ES256
(never ``none``, never an HMAC keyed with the provider's public key) and matches the key it
names; the key is in the provider's JWKS (fetched from discovery's ``jwks_uri``, kept an hour,
and fetched again for an unknown ``kid`` at most once a minute); the signature verifies; ``iss`` is
the configured issuer exactly; ``aud`` holds this client (with ``azp`` this client when it holds
others); ``exp`` is in the future and ``iat`` neither in the future nor older than ten minutes,
each within a minute's skew; ``nonce`` is the one this sign-on sent (compared in constant time).
PyJWT does the JOSE arithmetic; which algorithms, keys and claims count is decided here.
"""

from __future__ import annotations

import hmac
import threading
import time
from collections.abc import Callable

import jwt

from kcp_opa.core.errors import CodedError
from kcp_opa.core.jsonread import JsonDict, JsonObject

#: The only algorithms an ID token may be signed with (asymmetric: the provider's public keys verify them).
ALGORITHMS = ("RS256", "ES256")
_KEY_TYPES = {"RS256": ("RSA", None), "ES256": ("EC", "P-256")}
SKEW_SECONDS = 60
MAX_AGE_SECONDS = 600
#: An unknown ``kid`` makes the JWKS be fetched again, at most this often (a flood of made-up kids is one fetch).
REFETCH_SECONDS = 60.0
#: The JWKS is fetched again after this long whatever the tokens name (withdrawn keys stop counting).
KEYS_SECONDS = 3600.0


class OidcRefused(CodedError):
    """A sign-on the service does not believe or will not admit: no session is opened."""

    def __init__(self, message: str, code: str = "sso_refused") -> None:
        super().__init__(message, code)


class OidcUnavailable(CodedError):
    """The identity provider cannot be reached or answered nonsense: a fault, never a sign-in."""

    def __init__(self, message: str) -> None:
        super().__init__(message, "sso_unavailable")


class KeySet:
    """The provider's signing keys from ``jwks_uri``: cached, fetched again (bounded) for an unknown kid."""

    def __init__(self, fetch_jwks: Callable[[], JsonObject], *, refetch_seconds: float = REFETCH_SECONDS) -> None:
        self._fetch, self._refetch = fetch_jwks, refetch_seconds
        self._keys: list[JsonDict] = []
        self._fetched_at: float | None = None
        self._lock = threading.Lock()

    def _load(self) -> None:
        document = self._fetch()
        keys = document.get("keys")
        if not isinstance(keys, list):
            raise OidcUnavailable("the identity provider's JWKS has no keys list")
        self._keys = [key for key in keys if isinstance(key, dict)]
        self._fetched_at = time.monotonic()

    def key(self, kid: str | None, algorithm: str) -> jwt.PyJWK:
        """The key ``kid`` names for ``algorithm`` (its type must fit it); OidcRefused if there is none."""
        with self._lock:
            if self._fetched_at is None or time.monotonic() - self._fetched_at >= KEYS_SECONDS:
                self._load()  # a key the provider withdrew is trusted at most an hour longer
            found = self._find(kid, algorithm)
            stale = self._fetched_at is None or time.monotonic() - self._fetched_at >= self._refetch
            if found is None and stale:  # a rotated key: fetch again, at most once per REFETCH_SECONDS
                self._load()
                found = self._find(kid, algorithm)
        if found is None:
            shown = f"{str(kid)[:64]!r}, {algorithm}"
            raise OidcRefused(f"the ID token names a key ({shown}) the provider does not publish")
        try:
            return jwt.PyJWK(found, algorithm)
        except jwt.PyJWTError as exc:
            raise OidcRefused(f"the provider's key {str(kid)[:64]!r} is unusable: {exc}") from None

    def _find(self, kid: str | None, algorithm: str) -> JsonDict | None:
        kty, crv = _KEY_TYPES[algorithm]
        fitting = [
            key
            for key in self._keys
            if key.get("kty") == kty
            and (crv is None or key.get("crv") == crv)
            and key.get("alg", algorithm) == algorithm
            and key.get("use", "sig") == "sig"
        ]
        if kid is None:  # only an unambiguous key may be used without a kid
            return fitting[0] if len(fitting) == 1 else None
        return next((key for key in fitting if key.get("kid") == kid), None)


def verify_id_token(
    token: str, keys: KeySet, *, issuer: str, client_id: str, nonce: str, now: float | None = None
) -> JsonDict:
    """The claims of ``token`` once every check in the module's note holds; OidcRefused naming the first that fails."""
    try:
        header = jwt.get_unverified_header(token)
    except jwt.PyJWTError as exc:
        raise OidcRefused(f"the ID token is not a JWS: {exc}") from None
    algorithm = header.get("alg")
    if algorithm not in ALGORITHMS:
        accepted = ", ".join(ALGORITHMS)
        raise OidcRefused(f"the ID token is signed with {str(algorithm)[:20]!r}; only {accepted} are accepted")
    kid = header.get("kid")
    key = keys.key(kid if isinstance(kid, str) else None, str(algorithm))
    moment = time.time() if now is None else now
    try:
        claims: JsonDict = jwt.decode(
            token,
            key.key,
            algorithms=[str(algorithm)],
            audience=client_id,
            issuer=issuer,
            leeway=SKEW_SECONDS,
            options={"require": ["exp", "iat", "iss", "aud", "sub"], "verify_iat": False},
        )
    except jwt.ExpiredSignatureError:
        raise OidcRefused("the ID token has expired") from None
    except jwt.InvalidAudienceError:
        raise OidcRefused("the ID token is not for this client (aud)") from None
    except jwt.InvalidIssuerError:
        raise OidcRefused("the ID token is from another issuer (iss)") from None
    except jwt.InvalidSignatureError:
        raise OidcRefused("the ID token's signature does not verify") from None
    except jwt.PyJWTError as exc:
        raise OidcRefused(f"the ID token is not valid: {exc}") from None
    _check_claims(claims, client_id=client_id, nonce=nonce, now=moment)
    return claims


def _check_claims(claims: JsonObject, *, client_id: str, nonce: str, now: float) -> None:
    audience = claims.get("aud")
    if isinstance(audience, list) and len(audience) > 1 and claims.get("azp") != client_id:
        raise OidcRefused("the ID token is for several clients and its azp is not this one")
    issued = claims.get("iat")
    if not isinstance(issued, int | float) or isinstance(issued, bool):
        raise OidcRefused("the ID token's iat is not a time")
    if issued > now + SKEW_SECONDS:
        raise OidcRefused("the ID token is issued in the future (iat)")
    if issued < now - MAX_AGE_SECONDS - SKEW_SECONDS:
        raise OidcRefused(f"the ID token was issued more than {MAX_AGE_SECONDS} s ago (iat)")
    given = claims.get("nonce")
    if not isinstance(given, str) or not hmac.compare_digest(given.encode("utf-8"), nonce.encode("utf-8")):
        raise OidcRefused("the ID token's nonce is not this sign-on's")
