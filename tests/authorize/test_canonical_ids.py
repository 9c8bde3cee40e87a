"""Approvers are canonical identities: a variant of an id is the same principal, an invisible,
bidirectional or confusable one is refused (issue 15)."""

from __future__ import annotations

import pytest
from trustkit import DECIDED, KYA, refusal_code, signed

from kcp_opa.authorize.controls import ControlDesk
from kcp_opa.core.errors import ActionRejectedError
from kcp_opa.core.principalids import IdentityError, canonical_id


@pytest.mark.parametrize("variant", ["User_001", "user_001 ", " USER_001", "user_\uff10\uff10\uff11", "\uff35ser_001"])
def test_id_variants_are_the_same_principal(variant: str) -> None:
    assert canonical_id(variant) == "user_001"


@pytest.mark.parametrize(
    "variant", ["user\u200b_001", "user_001\u200d", "\u202euser_001", "us\u0435r_001", "user_001\u2066", ""]
)
def test_invisible_bidi_and_confusable_ids_are_refused(variant: str) -> None:
    with pytest.raises(IdentityError):
        canonical_id(variant)


@pytest.mark.parametrize(
    ("variant", "code"),
    [
        ("User_001", "self_approval"),
        ("user_001 ", "self_approval"),
        ("user_\uff10\uff10\uff11", "self_approval"),
        ("user\u200b_001", "non_canonical_id"),
        ("us\u0435r_001", "non_canonical_id"),
    ],
)
def test_the_subject_cannot_approve_under_an_id_variant(desk: ControlDesk, variant: str, code: str) -> None:
    record = desk.open(KYA, now=DECIDED)
    assert refusal_code(desk, record, signed(record, "independent_human_approval", variant)) == code


def test_a_party_id_with_a_hidden_character_never_becomes_a_party(desk: ControlDesk) -> None:
    """The action's identifier contract refuses it before any decision, so no evidence can bind to it."""
    action = {**KYA, "action_id": "act_hidden", "agent_id": "agent_payments\u200b_001"}
    with pytest.raises(ActionRejectedError, match="agent_id"):
        desk.open(action, now=DECIDED)
