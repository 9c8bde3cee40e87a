"""Declaration mutations for the differential fuzzer: manifests, matrices and registries (issue 26).

Each mutated world starts from a reference deployment (its manifest, matrix and the demo trust
registry), changes one to three strings or keys the way a careless author or an attacker with
write access would (a quote, a backslash, TAB/CR/LF, a trailing space, a Unicode look-alike, an
empty string...) and compiles it. A declaration the validator or compiler refuses counts as
refused; one it accepts becomes a deployment whose mutated values the action mutations draw
from (units, fields, roles, environments, not_for purposes), decided on both engines like any
other. The YAML written is JSON with ASCII escapes, so every inserted character is read back as
written (YAML 1.2 is a superset of JSON).
"""

from __future__ import annotations

import json
import random
import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from differential import REPO, Deployment, make_deployment

from kcp_opa.compile.compiler import CompileOptions, compile_bundle
from kcp_opa.core.errors import KcpOpaError
from kcp_opa.declare.yamlsource import load_yaml

TRUST = REPO / "fixtures" / "trust" / "registry.yaml"
#: Inserted characters: what JSON escapes, what sorts below regopy's closing quote, what folds.
INSERTS = ('"', "\\", "\t", "\r", "\n", " ", "!", "'", "\u00a0", "\u2028", "\u200b", "\x7f", "\u0085", "İ", "/")
LOOKALIKES = {"a": "\u0430", "e": "\u0435", "o": "\u043e", "i": "\u0456", "c": "\u0441", "p": "\u0440", "-": "\u2010"}
#: Keys whose strings the policies read: most mutations go there.
READ = frozenset({
    "id", "project", "not_for", "data_residency", "regions", "restrictions", "regulations", "data_categories",
    "declared_fields", "auth_scope", "supersedes", "superseded_by", "environment", "agent_role", "access",
    "sensitivity", "default", "roles", "sender_roles", "approver_roles", "by_task_type", "task_types", "kcp_action",
    "controls", "separation_of_duties", "version", "name", "legal_basis", "review_contact", "on_stale", "authority",
    "visibility", "auth_scopes", "temporal", "rate_limits", "high_value_minor", "confirmation_minor",
})  # fmt: skip


#: Keys the schemas hold to a closed list: a mutation there is only ever a schema refusal.
FIXED = frozenset({"kind", "format_version", "type", "alg", "kid", "public_key", "scope", "audience", "path"})


def case_sweep(deployment: Deployment) -> Iterator[tuple[str, dict[str, Any], str, list[str]]]:
    """Every case of the deployment as written, and once more stating each declared not_for entry
    (mutated or not) as its purpose: the actions that reach what the mutation changed."""
    for case_id, action, now in deployment.cases:
        yield case_id, action, now, []
        if isinstance(action.get("knowledge"), dict):
            for purpose in deployment.purposes:
                variant = json.loads(json.dumps(action))
                variant["knowledge"]["purpose"] = purpose
                yield f"{case_id}+not_for", variant, now, []


@dataclass
class DeclarationTally:
    mutated: int = 0
    refused: int = 0
    crashes: list[dict[str, Any]] = field(default_factory=list)
    refusals: Counter[str] = field(default_factory=Counter)
    worlds: dict[str, list[str]] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"mutated": self.mutated, "refused": self.refused, "accepted": self.mutated - self.refused,
                "compile_crashes": self.crashes[:25], "refusals": dict(sorted(self.refusals.items())),
                "accepted_worlds": self.worlds}  # fmt: skip


def _sites(doc: Any, path: tuple[Any, ...] = ()) -> list[tuple[tuple[Any, ...], bool]]:
    """(path, is_key) of every string value and mapping key."""
    found: list[tuple[tuple[Any, ...], bool]] = []
    if isinstance(doc, dict):
        for key, value in doc.items():
            found.append(((*path, key), True))
            found.extend(_sites(value, (*path, key)))
    elif isinstance(doc, list):
        for index, value in enumerate(doc):
            found.extend(_sites(value, (*path, index)))
    elif isinstance(doc, str):
        found.append((path, False))
    return found


def _mutate_text(text: str, rng: random.Random) -> str:
    roll = rng.random()
    if roll < 0.35:  # a YAML `|` block, a pasted value: a control character at the end
        return text + rng.choice(("\n", "\t", "\r", "\r\n"))
    if roll < 0.55:
        at = rng.choice((0, len(text) // 2, len(text)))
        return text[:at] + rng.choice(INSERTS) + text[at:]
    if roll < 0.7:
        return text + " "
    if roll < 0.82 and any(c in LOOKALIKES for c in text):
        spots = [i for i, c in enumerate(text) if c in LOOKALIKES]
        i = rng.choice(spots)
        return text[:i] + LOOKALIKES[text[i]] + text[i + 1 :]
    if roll < 0.94:
        return ""
    return f'"{text}"'


def _apply(doc: Any, path: tuple[Any, ...], is_key: bool, rng: random.Random) -> str:
    parent = doc
    for part in path[:-1]:
        parent = parent[part]
    last = path[-1]
    if is_key:
        new = _mutate_text(str(last), rng)
        if new in parent:
            return "(no change)"
        parent[new] = parent.pop(last)
        return f"key {'/'.join(map(str, path))} -> {new!r}"
    new = _mutate_text(parent[last], rng)
    parent[last] = new
    return f"{'/'.join(map(str, path))} -> {new!r}"


def mutate(docs: dict[str, Any], rng: random.Random) -> list[str]:
    """Change 1-3 strings or keys across the documents in place; what was changed."""
    done = []
    for _ in range(rng.randint(1, 3)):
        which = rng.choice(("knowledge", "knowledge", "matrix", "trust"))
        sites = _sites(docs[which])
        read = [s for s in sites if any(str(p) in READ for p in s[0]) and not any(str(p) in FIXED for p in s[0])]
        path, is_key = rng.choice(read if read and rng.random() < 0.9 else sites)
        done.append(f"{which}: {_apply(docs[which], path, is_key, rng)}")
    return done


def mutated_deployment(name: str, cases: list[Any], number: int, index: int, out: Path,
                       tally: DeclarationTally) -> Deployment | None:  # fmt: skip
    """A compiled mutated world, or None when its declarations were refused (counted)."""
    rng = random.Random(f"{name}/{number}/{index}")
    base = REPO / "fixtures" / "deployments" / name
    docs = {
        "knowledge": load_yaml(base / "knowledge.yaml").data,
        "matrix": load_yaml(base / "matrix.yaml").data,
        "trust": load_yaml(TRUST).data,
    }
    changes = mutate(docs, rng)
    tally.mutated += 1
    world = out / f"{name}-{number}-{index}"
    world.mkdir(parents=True, exist_ok=True)
    for key, doc in docs.items():
        (world / f"{key}.yaml").write_text(json.dumps(doc, ensure_ascii=True, indent=1) + "\n", encoding="utf-8")
    bundle = world / "bundle.tar.gz"
    try:
        compile_bundle([world / "knowledge.yaml"], world / "matrix.yaml", REPO / "policies", bundle,
                       options=CompileOptions(engine_check=False, trust_path=world / "trust.yaml"))  # fmt: skip
    except KcpOpaError as exc:
        tally.refused += 1
        code = re.search(r"\[([a-z_]+)\]", str(exc))
        tally.refusals[code.group(1) if code else type(exc).__name__] += 1
        return None
    except Exception as exc:  # a crash of the compiler is a finding of its own
        tally.refused += 1
        tally.crashes.append({"world": world.name, "changes": changes, "error": f"{type(exc).__name__}: {exc}"})
        return None
    label = f"{name}~{number}.{index}"
    tally.worlds[label] = changes
    deployment = make_deployment(label, bundle, cases, docs["knowledge"], docs["matrix"])
    deployment.engines()
    return deployment
