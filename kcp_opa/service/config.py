"""What the service is started with: one :class:`ServiceConfig`, built once, from ``kcp-opa serve``'s
options or a JSON file (``serve --config FILE``; an option given on the command line wins).

Start (loading.py ``open_service``) and every reload (reloading.py) read the same config: a reload
re-reads the files it names. It names files and settings only, never key material or tokens:
secrets stay in the files and environment variables it points at. What a host embedding the
service hands in as objects instead (handlers it defined, its own context sources, keys it
holds) is :class:`HostParts`.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, TypeVar

from kcp_opa.compile.signatures import Verification
from kcp_opa.context import ContextSources, StaticGateConfig
from kcp_opa.context.factcontract import fact_problem
from kcp_opa.core import strictjson
from kcp_opa.core.errors import CodedError
from kcp_opa.core.files import read_regular
from kcp_opa.core.jsonread import JsonDict, JsonObject
from kcp_opa.core.signing import Key, Keyring
from kcp_opa.execute.executor import Handler

DEFAULT_STORE = "audit/service.db"
DEFAULT_LEDGER = "audit/service.jsonl"
DEFAULT_TOKEN_ENV = "KCP_OPA_SERVE_TOKEN"  # noqa: S105 (the variable's name, not a token)


class ServiceConfigError(CodedError):
    """A configuration the service cannot start with (exit 2; one line naming the setting)."""

    code = "service_config"


T = TypeVar("T")
_ORIGIN = re.compile(r"https?://[A-Za-z0-9.-]+(?::[0-9]{1,5})?")


@dataclass(frozen=True)
class ServiceConfig:
    """Every setting of one service; each field is the ``kcp-opa serve`` option of the same name."""

    bundle: Path
    store: str = DEFAULT_STORE
    #: The store and the ledger: a file, or a postgresql:// location (its password never in it).
    ledger: str = DEFAULT_LEDGER
    transport: str = "stdio"
    host: str = "127.0.0.1"
    port: int = 8181
    #: The trust registry, the issuers the service signs answers as and their keyring (re-read on reload).
    trust: Path | None = None
    issuer_ids: tuple[str, ...] = ()
    issuer_keyring: Path | None = None
    #: The callers: token hashes (http) or the stdio principal, with --trust; else the local agent's token.
    tokens: Path | None = None
    principal: str | None = None
    token_env: str = DEFAULT_TOKEN_ENV
    #: The receipt keyring (re-read on reload) or a signing key (a pkcs11: URI: loaded once, kept).
    keyring: Path | None = None
    signing_key: str | None = None
    ledger_key: str | None = None
    handlers: Path | None = None
    plan_cache: Path | None = None
    otel: bool = False
    bundle_source: str | None = None
    poll_seconds: float = 30.0
    mode: str = "enforce"
    mode_second_approval: bool = False
    shadow_bundle: Path | None = None
    verification_keys: tuple[str, ...] = ()
    verification_scope: str = ""
    region: str | None = None
    environment: str | None = None
    attestations: Path | None = None
    #: Signed, expiring exceptions (kind kcp-opa/exceptions), verified with --trust; re-read on reload.
    exceptions: Path | None = None
    #: Obligations the AuthZEN gateway in front enforces: an ALLOW owing only these (and ``audit``,
    #: which the gate keeps) answers ``decision: true`` (kcp_opa.service.authzen.answer).
    authzen_obligations: tuple[str, ...] = ()
    #: The origin gateways reach this PDP at (AuthZEN metadata's ``policy_decision_point``); None:
    #: the URL each request reached.
    public_url: str | None = None
    #: The UI's single sign-on (kcp_opa.service.oidc): the OpenID provider, this client, its secret
    #: (a 0600 file; else $KCP_OPA_OIDC_CLIENT_SECRET) and the users file (claim value -> principal id).
    oidc_issuer: str | None = None
    oidc_client_id: str | None = None
    oidc_client_secret_file: Path | None = None
    oidc_users: Path | None = None

    def __post_init__(self) -> None:
        if self.public_url is not None and _ORIGIN.fullmatch(self.public_url) is None:
            raise ServiceConfigError(
                f"public_url {self.public_url[:200]!r}: an origin such as https://pdp.example.com (scheme and host, "
                "optional port, no path)"
            )
        if self.transport not in {"stdio", "http"}:
            raise ServiceConfigError(f"transport {self.transport!r}: stdio or http")
        if self.mode not in {"enforce", "log_only"}:
            raise ServiceConfigError(f"mode {self.mode!r}: enforce or log_only")
        if self.trust is None and (self.issuer_ids or self.issuer_keyring or self.tokens or self.principal):
            raise ServiceConfigError("--issuer-id, --issuer-keyring, --tokens and --principal need --trust")
        if self.trust is None and self.exceptions is not None:
            raise ServiceConfigError("--exceptions needs --trust (the registry names their issuers and grantors)")
        if self.trust is not None and (not self.issuer_ids or self.issuer_keyring is None):
            raise ServiceConfigError("--trust needs --issuer-id and --issuer-keyring (or $KCP_OPA_ISSUER_KEYRING)")
        if self.oidc_issuer is None and (self.oidc_client_id or self.oidc_client_secret_file or self.oidc_users):
            raise ServiceConfigError("--oidc-client-id, --oidc-client-secret-file and --oidc-users need --oidc-issuer")
        if self.oidc_issuer is not None and (
            self.transport != "http" or self.trust is None or not self.oidc_client_id or self.oidc_users is None
        ):
            raise ServiceConfigError(
                "--oidc-issuer needs --transport http, --trust (the principals' roles), --oidc-client-id and"
                " --oidc-users"
            )
        if self.keyring is not None and self.signing_key is not None:
            raise ServiceConfigError("give --keyring or --signing-key, not both")
        for option, fact_name, value in (
            ("--region", "deployment_region", self.region),
            ("--environment", "environment", self.environment),
        ):
            problem = fact_problem(fact_name, value) if value is not None else None
            if problem is not None:  # both engines must read the gate's own facts alike (docs/input-contract.md)
                raise ServiceConfigError(f"{option} {value!r}: {problem}")

    def verification(self) -> Verification | None:
        """The keys and scope every bundle (at start and on each reload) must be signed with."""
        return Verification.from_specs(self.verification_keys, self.verification_scope or None)

    def gate_facts(self) -> StaticGateConfig:
        """The gate's own facts (--region, --environment)."""
        return StaticGateConfig(deployment_region=self.region, environment=self.environment)

    @classmethod
    def from_dict(cls, raw: JsonObject, *, base: Path | None = None) -> ServiceConfig:
        """From JSON names (the fields'); a relative path is taken from ``base`` (the file's directory)."""
        known = {f.name: f for f in fields(cls)}
        unknown = sorted(set(raw) - set(known))
        if unknown:
            raise ServiceConfigError(f"unknown setting {unknown[0]!r} (the settings are {', '.join(known)})")
        if "bundle" not in raw:
            raise ServiceConfigError("the bundle setting is required")
        values: dict[str, Any] = {}  # keyword arguments, each checked against its field's type below
        for name, value in raw.items():
            kind = str(known[name].type)
            if value is None:
                values[name] = None
            elif name in {"store", "ledger"}:  # a file (taken from ``base`` when relative) or a database URL
                location = _typed(name, value, str)
                relative = "://" not in location and not Path(location).is_absolute()
                values[name] = str(base / location) if base is not None and relative else location
            elif "Path" in kind:
                path = Path(_typed(name, value, str))
                values[name] = base / path if base is not None and not path.is_absolute() else path
            elif "tuple" in kind:
                items = _typed(name, value, list, tuple)
                values[name] = tuple(_typed(name, item, str) for item in items)
            elif kind == "bool":
                values[name] = _typed(name, value, bool)
            elif kind == "int":
                values[name] = _typed(name, value, int)
            elif kind == "float":
                values[name] = float(_typed(name, value, int, float))
            else:
                values[name] = _typed(name, value, str)
        return cls(**values)

    @classmethod
    def from_file(cls, path: Path, overrides: Mapping[str, Any] | None = None) -> ServiceConfig:
        """A JSON object of settings; ``overrides`` (the options given on the command line) win."""
        try:
            raw = strictjson.loads(read_regular(path))
        except (OSError, ValueError) as exc:
            raise ServiceConfigError(f"{path}: cannot read the service config: {exc}") from None
        if not isinstance(raw, dict):
            raise ServiceConfigError(f"{path}: the service config is a JSON object of settings")
        config = cls.from_dict(raw, base=path.resolve().parent)
        return dataclasses.replace(config, **dict(overrides or {}))

    def to_dict(self) -> JsonDict:
        """The JSON form ``from_dict`` reads back (paths as strings)."""
        out: JsonDict = {}
        for item in fields(self):
            value = getattr(self, item.name)
            out[item.name] = (
                str(value) if isinstance(value, Path) else list(value) if isinstance(value, tuple) else value
            )
        return out


def _typed(name: str, value: object, *kinds: type[T]) -> T:
    if (isinstance(value, bool) and bool not in kinds) or not isinstance(value, kinds):
        raise ServiceConfigError(f"setting {name!r}: expected {' or '.join(k.__name__ for k in kinds)}")
    return value


@dataclass(frozen=True)
class HostParts:
    """What a host embedding the service passes as objects rather than files named in the config."""

    #: Execution handlers (else the config's handlers file).
    handlers: Mapping[str, Handler] | None = field(default=None, repr=False)
    #: The gate's context sources, kept across reloads (else the registry's, --region's and --attestations').
    context: ContextSources | None = None
    #: The receipt keyring (else --keyring, --signing-key, or the store's own key).
    keyring: Keyring | None = None
    #: The ledger's writer key (else --ledger-key).
    ledger_key: Key | None = None
