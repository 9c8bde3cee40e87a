"""``kcp-opa facts sign|spend|post``: an issuer signs one fact the gate takes from attestations.

The KYC provider, beneficiary registry or identity provider the trust registry lists for a fact
(``issuers[*].facts``) signs it here, for one action (bound to its hash) or for one subject,
with an expiry; the gate's ``--attestations`` file (``serve`` and ``decide``) holds the result.
``spend`` signs a metering issuer's spend attestation (what an agent run cost, which the gate
cannot count itself). ``post`` sends a signed fact to a running gate (``POST /v1/facts``). The
logic is ``kcp_opa.context.issuing`` and ``kcp_opa.service.factclient``.
"""

from __future__ import annotations

import os
from pathlib import Path

import click

from kcp_opa.cli import render
from kcp_opa.cli.options import file_option, keyring_option, now_option, signing_key_option, trust_option
from kcp_opa.cli.output import read_text
from kcp_opa.context.facts import ATTESTED_VALUES
from kcp_opa.context.issuing import (
    add_attestation,
    binding,
    issuer_key,
    moment,
    sign_fact_attestation,
    sign_spend_attestation,
    validity,
)
from kcp_opa.core import strictjson
from kcp_opa.core.jsonread import JsonObject
from kcp_opa.core.signing import Keyring, load_keyring
from kcp_opa.decide.action import action_hash, parse_action
from kcp_opa.decide.gate import decision_time
from kcp_opa.declare.trust import TrustRegistry, load_trust
from kcp_opa.service.factclient import post_fact_to

#: Said on stderr when no registry checked what was signed.
UNCHECKED = "kcp-opa: note: not checked against a trust registry (--trust checks the issuer, the fact and the key)"


@click.group()
def facts() -> None:
    """Attested facts (evidence status, beneficiary status, screening) and metered spend: sign them as their issuer."""


@facts.command(name="sign")
@click.option("--issuer", required=True, help="The registered issuer signing (its registry entry lists the fact).")
@keyring_option("The issuer's keyring file (mode 0600); --kid picks the key [default: its signing kid].")
@click.option("--kid", help="Key id in --keyring [default: the keyring's signing kid].")
@signing_key_option()
@click.option(
    "--fact",
    "fact_name",
    required=True,
    type=click.Choice(sorted(ATTESTED_VALUES)),
    help="The attested fact.",
)
@click.option(
    "--value", required=True, help="Its value: true/false, or for evidence_status present|missing|stale|forbidden."
)
@click.option("--action", "action_path", metavar="ACTION.json", help="Bind the fact to this action (its hash).")
@click.option(
    "--action-hash",
    "hash_text",
    help="Bind the fact to the action with this hash (sha256:..., as a decision shows it).",
)
@click.option("--subject", "subject_id", help="Bind the fact to this subject (every action with this subject_id).")
@click.option(
    "--tenant",
    "tenant_id",
    help="With --subject: only that tenant's actions (a subject id may be another person in another tenant).",
)
@now_option("Issue time [default: now].")
@click.option("--expires-at", metavar="RFC3339", help="When the fact stops counting.")
@click.option("--expires-in", metavar="SPAN", help="Or how long it counts from the issue time (1h, 30m, 14d).")
@trust_option("Check against this trust registry that the gate will accept it (the issuer, the fact, the key).")
@file_option("--issuer-keys", help="With --trust: keyring of HMAC issuers' secrets (Ed25519 keys: the registry).")
@file_option("-o", "--output", help="Add the attestation to this JSON list (the gate's --attestations file).")
def sign(
    issuer: str,
    keyring_path: Path | None,
    kid: str | None,
    signing_key: str | None,
    fact_name: str,
    value: str,
    action_path: str | None,
    hash_text: str | None,
    subject_id: str | None,
    tenant_id: str | None,
    now: str | None,
    expires_at: str | None,
    expires_in: str | None,
    trust: Path | None,
    issuer_keys: Path | None,
    output: Path | None,
) -> None:
    """Sign one attested fact as ISSUER, bound to an action or a subject, until an expiry.

    \b
    kcp-opa facts sign --issuer bank-registry --keyring issuer-keys.json --kid bank-registry-1 \\
      --fact new_beneficiary --value true --subject user_001 --tenant tenant_demo --expires-in 1h \\
      --trust registry.yaml --output attestations.json

    The key never goes in argv: a keyring file only its owner may read (0600), or a pkcs11: URI
    (the PIN from pin-source or $KCP_OPA_PKCS11_PIN). Prints the signed attestation (JSON).
    """
    if action_path is not None and hash_text is not None:
        raise click.UsageError("give --action or --action-hash, not both")
    if action_path is not None:
        hash_text = action_hash(parse_action(read_text(action_path, "action")))
    bound = binding(hash_text, subject_id, tenant_id)
    times = validity(decision_time(now), expires_at, expires_in)
    key = issuer_key(signing_key, keyring_path, kid)
    registry, ring = _checks(trust, issuer_keys)
    item = sign_fact_attestation(
        fact_name, value, issuer, key, bound=bound, times=times, registry=registry, keyring=ring
    )
    _emit(item, output, checked=registry is not None)


@facts.command(name="spend")
@click.option(
    "--issuer", required=True, help="The registered metering issuer (its registry entry lists metered_spend)."
)
@keyring_option("The issuer's keyring file (mode 0600); --kid picks the key [default: its signing kid].")
@click.option("--kid", help="Key id in --keyring [default: the keyring's signing kid].")
@signing_key_option()
@click.option("--budget", required=True, help="The matrix budget's id the spend counts against.")
@click.option(
    "--subject", required=True, help="The key the budget counts under (its per: tenant id, agent id, task type)."
)
@click.option("--amount-minor", required=True, type=click.IntRange(min=0), help="The spend in minor units (cents).")
@click.option("--currency", required=True, help="Its currency (the budget's, e.g. USD).")
@click.option("--period-start", required=True, metavar="RFC3339", help="When the metered period began.")
@click.option("--period-end", required=True, metavar="RFC3339", help="When it ended.")
@now_option("Issue time [default: now].")
@click.option("--expires-at", metavar="RFC3339", help="When the attestation stops counting.")
@click.option("--expires-in", metavar="SPAN", help="Or how long it counts from the issue time (1h, 30m, 14d).")
@trust_option("Check against this trust registry that the gate will count it (the issuer and its key).")
@file_option("--issuer-keys", help="With --trust: keyring of HMAC issuers' secrets (Ed25519 keys: the registry).")
@file_option("-o", "--output", help="Add the attestation to this JSON list (the gate's --attestations file).")
def spend(
    issuer: str,
    keyring_path: Path | None,
    kid: str | None,
    signing_key: str | None,
    budget: str,
    subject: str,
    amount_minor: int,
    currency: str,
    period_start: str,
    period_end: str,
    now: str | None,
    expires_at: str | None,
    expires_in: str | None,
    trust: Path | None,
    issuer_keys: Path | None,
    output: Path | None,
) -> None:
    """Sign what an agent run cost that the gate cannot see, as the metering ISSUER (docs/budgets.md).

    \b
    kcp-opa facts spend --issuer metering-service --keyring metering-keys.json \\
      --budget tenant_daily_usd --subject tenant_demo --amount-minor 120000 --currency USD \\
      --period-start 2026-11-29T08:00:00Z --period-end 2026-11-29T09:00:00Z --expires-in 2h \\
      --trust registry.yaml --output attestations.json
    """
    period = (moment(period_start, "--period-start"), moment(period_end, "--period-end"))
    times = validity(decision_time(now), expires_at, expires_in)
    key = issuer_key(signing_key, keyring_path, kid)
    registry, ring = _checks(trust, issuer_keys)
    fields = {"budget": budget, "subject": subject, "amount_minor": amount_minor, "currency": currency}
    item = sign_spend_attestation(fields, issuer, key, period=period, times=times, registry=registry, keyring=ring)
    _emit(item, output, checked=registry is not None)


@facts.command(name="post")
@click.argument("attestation", metavar="ATTESTATION.json|-")
@click.option(
    "--url", required=True, help="The gate's origin (kcp-opa serve --transport http), e.g. http://127.0.0.1:8181."
)
@click.option(
    "--token-env",
    default="KCP_OPA_TOKEN",
    show_default=True,
    help="The environment variable holding the issuer's bearer token (never in argv).",
)
def post(attestation: str, url: str, token_env: str) -> None:
    """Post one signed attestation (as `facts sign` prints it) to a running gate as its issuer.

    \b
    kcp-opa facts sign --issuer bank-registry --keyring issuer-keys.json --fact new_beneficiary \\
      --value true --action action.json --expires-in 1h --trust registry.yaml |
      kcp-opa facts post - --url http://127.0.0.1:8181

    The caller is the issuer: a registry principal with the issuer's id (docs/service.md, "Posted
    facts"). Prints what the gate kept; a refusal is one line with the gate's code (exit 2).
    """
    try:
        item = strictjson.loads(read_text(attestation, "attestation"))
    except ValueError as exc:
        raise click.UsageError(f"{attestation}: not one JSON attestation: {str(exc)[:200]}") from None
    if not isinstance(item, dict):
        raise click.UsageError(f"{attestation}: one attestation is a JSON object (as `facts sign` prints it)")
    render.print_json(post_fact_to(url, os.environ.get(token_env, ""), item))


def _checks(trust: Path | None, issuer_keys: Path | None) -> tuple[TrustRegistry | None, Keyring | None]:
    """The registry (and HMAC issuers' keyring) to check an attestation against, before it is written."""
    registry = load_trust(trust) if trust is not None else None
    if issuer_keys is not None and registry is None:
        raise click.UsageError("--issuer-keys goes with --trust (it holds HMAC issuers' secrets for the check)")
    return registry, load_keyring(issuer_keys) if issuer_keys is not None else None


def _emit(item: JsonObject, output: Path | None, *, checked: bool) -> None:
    """Add the signed attestation to ``output`` (if given) and print it; say so when nothing checked it."""
    if output is not None:
        add_attestation(output, item)
    if not checked:
        click.echo(UNCHECKED, err=True)
    render.print_json(item)
