"""The CI slice of ``kcp-opa mutate``: a stratified sample that tracks the full run's score.

A full run is too slow for every CI run, and a fixed sample drifts from the full score as the
policies change. So the full run records its result, keyed by a fingerprint of everything it
read (the policy modules with their tests, the decision cases, the cases' deployments); the
slice refuses a record whose fingerprint is not the current one, reports the recorded full
score beside its own, and draws its sample from the recorded run:

- stratified by policy file, each file's share proportional to its scored mutants (largest
  remainders), so no file dominates by chance;
- seeded by the fingerprint, so the sample changes whenever the policies, tests or cases do;
- from the mutants the full run *scored* (no invalid or excused ones), and each drawn mutant
  is checked against its recorded status: a recorded kill the suite no longer makes means
  the record is wrong.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from kcp_opa.authoring.mutate import MutantResult, Status
from kcp_opa.authoring.mutate_ops import Mutant
from kcp_opa.core.jsonread import JsonDict, JsonObject, integer, mapping, number

RECORD_FORMAT = 1
SLICE_SIZE = 40  # the CI slice's sample (make mutate-slice); a full run reports its score on this draw
_NOT_KILLED = (Status.SURVIVED, Status.EXCUSED, Status.INVALID, Status.TIMEOUT)


def fingerprint(modules: Mapping[str, str], files: Iterable[tuple[str, bytes]]) -> str:
    """SHA-256 over every policy module (tests included) and every other input file, by name
    relative to its root, so the same tree has the same fingerprint in any checkout."""
    digest = hashlib.sha256()
    for name, source in sorted(modules.items()):
        digest.update(b"rego\0" + name.encode() + b"\0" + source.encode() + b"\0")
    for name, data in sorted(files):
        digest.update(b"file\0" + name.encode() + b"\0" + data + b"\0")
    return digest.hexdigest()


def input_files(case_paths: Sequence[Path], deployments: Path, names: Iterable[str]) -> list[tuple[str, bytes]]:
    """The decision-case files and every file of the deployments they name, as (name, bytes)."""
    files = [(f"cases/{path.name}", path.read_bytes()) for path in case_paths]
    for name in sorted(set(names)):
        base = deployments / name
        if base.is_dir():
            files.extend(
                (f"deployments/{path.relative_to(deployments).as_posix()}", path.read_bytes())
                for path in sorted(base.rglob("*"))
                if path.is_file()
            )
    return files


def quotas(sizes: Mapping[str, int], total: int) -> dict[str, int]:
    """``total`` split over the strata in proportion to ``sizes`` (largest remainders; ties by
    name), never more than a stratum holds."""
    population = sum(sizes.values())
    if total >= population:
        return dict(sizes)
    exact = {name: total * size / population for name, size in sizes.items()}
    shares = {name: int(value) for name, value in exact.items()}
    by_remainder = sorted(sizes, key=lambda name: (-(exact[name] - shares[name]), name))
    for name in by_remainder[: total - sum(shares.values())]:
        shares[name] += 1
    return shares


def stratified_sample(mutants: Sequence[Mutant], size: int, seed: str) -> list[Mutant]:
    """``size`` of ``mutants``, each file's share proportional to its count, drawn with a
    generator seeded by ``seed`` (the same seed and mutants always give the same sample)."""
    by_file: dict[str, list[Mutant]] = {}
    for mutant in mutants:
        by_file.setdefault(mutant.file, []).append(mutant)
    generator = random.Random(int(hashlib.sha256(seed.encode()).hexdigest(), 16))  # noqa: S311 (reproducible, not secret)
    chosen: list[Mutant] = []
    for name, share in sorted(quotas({k: len(v) for k, v in by_file.items()}, size).items()):
        chosen.extend(generator.sample(sorted(by_file[name], key=lambda m: (m.start, m.key)), share))
    return sorted(chosen, key=lambda m: (m.file, m.start, m.key))


@dataclass(frozen=True)
class Record:
    """What a full run leaves for the slice: its fingerprint, score and non-killed mutants."""

    fingerprint: str
    score: float
    summary: JsonObject
    threshold: float | None
    seconds: float
    statuses: Mapping[str, str]  # mutant key -> status, for every mutant not killed

    def status_of(self, mutant: Mutant) -> Status:
        return Status(self.statuses.get(mutant.key, Status.KILLED.value))

    def scored(self, mutants: Sequence[Mutant]) -> list[Mutant]:
        return [m for m in mutants if self.status_of(m) not in (Status.INVALID, Status.EXCUSED)]


def record_of(
    results: Sequence[MutantResult],
    summary: JsonObject,
    fingerprint_: str,
    seconds: float,
    threshold: float | None,
) -> Record:
    statuses = {r.mutant.key: r.status.value for r in results if r.status in _NOT_KILLED}
    return Record(
        fingerprint_, round(number(summary["score"]) or 0.0, 2), summary, threshold, round(seconds, 1), statuses
    )


def write_record(record: Record, view: SliceView) -> bytes:
    """The record as committed JSON (sorted, one mutant a line, so a diff shows what changed)."""
    document = {
        "format": RECORD_FORMAT,
        "about": "kcp-opa mutate: the last full run over these policies (make mutate-policies writes it)",
        "fingerprint": record.fingerprint,
        "score": record.score,
        "threshold": record.threshold,
        "seconds": record.seconds,
        "counts": {k: v for k, v in record.summary.items() if k not in ("files", "score")},
        "files": {
            name: {
                "score": round(number(item["score"]) or 0.0, 1),
                "killed": item["killed"],
                "survived": item["survived"],
            }
            for name, item in ((n, mapping(i)) for n, i in mapping(record.summary["files"]).items())
        },
        "slice": {"size": view.sample_size, "score": view.sample_score},
        "not_killed": dict(sorted(record.statuses.items())),
    }
    return (json.dumps(document, indent=1, sort_keys=False) + "\n").encode()


class RecordError(ValueError):
    """The record cannot be used: missing, unreadable, or for other policies."""


def read_record(path: Path, current: str) -> Record:
    """The record at ``path`` if it was written for the ``current`` fingerprint."""
    remedy = f"run `make mutate-policies` (kcp-opa mutate ... --score-file {path}) and commit {path}"
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise RecordError(f"{path}: no full mutation run recorded; {remedy}") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise RecordError(f"{path}: unreadable ({exc}); {remedy}") from None
    if not isinstance(document, dict) or document.get("format") != RECORD_FORMAT:
        raise RecordError(f"{path}: not a format-{RECORD_FORMAT} mutation record; {remedy}")
    if document.get("fingerprint") != current:
        raise RecordError(f"{path}: stale, the policies, tests or cases changed since the full run; {remedy}")
    try:
        statuses = {str(k): Status(v).value for k, v in dict(document["not_killed"]).items()}
        counts = dict(document["counts"])
        return Record(
            current,
            float(document["score"]),
            {**counts, "score": float(document["score"]), "files": dict(document["files"])},
            None if document.get("threshold") is None else float(document["threshold"]),
            float(document.get("seconds") or 0.0),
            statuses,
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise RecordError(f"{path}: malformed ({exc}); {remedy}") from None


def disagreements(record: Record, results: Sequence[MutantResult]) -> list[MutantResult]:
    """The sampled mutants the record says were detected but this run saw survive."""
    detected = (Status.KILLED, Status.TIMEOUT)
    return [r for r in results if r.status is Status.SURVIVED and record.status_of(r.mutant) in detected]


def seed_text(fingerprint_: str, seed: int | None) -> str:
    return fingerprint_ if seed is None else f"{fingerprint_}:{seed}"


def score_of(statuses: Iterable[Status]) -> float:
    """(killed + timeout) / (those + survived), in percent; 100 when nothing is scored."""
    counted = [s for s in statuses if s in (Status.KILLED, Status.TIMEOUT, Status.SURVIVED)]
    detected = sum(s is not Status.SURVIVED for s in counted)
    return round(100.0 * detected / len(counted), 2) if counted else 100.0


@dataclass(frozen=True)
class SliceView:
    """The full score beside the slice's: what ``make mutate-policies`` and ``make mutate-slice`` print."""

    full_score: float | None = None
    full_mutants: int | None = None
    sample_size: int | None = None
    sample_score: float | None = None
    recorded_sample_score: float | None = None  # the record's statuses of the same draw
    disagreements: tuple[MutantResult, ...] = ()

    def to_dict(self) -> JsonDict:
        if self.full_score is None and self.sample_score is None:
            return {}
        return {
            "full_run": None if self.full_score is None else {"score": self.full_score, "mutants": self.full_mutants},
            "slice": None
            if self.sample_score is None
            else {"size": self.sample_size, "score": self.sample_score, "recorded_score": self.recorded_sample_score},
            "disagreements": [r.mutant.key for r in self.disagreements],
        }


def compare(record: Record | None, results: Sequence[MutantResult], sample: int | None, seed: str) -> SliceView:
    """The full score beside the slice's. A full run (``sample`` None) with a record scores the
    CI slice's own draw from its results; a slice scores itself, and with a record also the
    record's statuses of the same mutants and lists where they disagree."""
    if sample is None:
        if record is None:
            return SliceView()
        by_key = {r.mutant.key: r for r in results}
        draw = stratified_sample(record.scored([r.mutant for r in results]), SLICE_SIZE, seed)
        return SliceView(
            record.score,
            len(results),
            len(draw),
            score_of(by_key[m.key].status for m in draw),
        )
    live = score_of(r.status for r in results)
    if record is None:
        return SliceView(sample_size=len(results), sample_score=live)
    return SliceView(
        record.score,
        integer(record.summary.get("mutants")) or 0,
        len(results),
        live,
        score_of(record.status_of(r.mutant) for r in results),
        tuple(disagreements(record, results)),
    )


def select(
    everything: Sequence[Mutant], sample: int | None, score_file: Path | None, fingerprint_: str, seed: int | None
) -> tuple[Record | None, list[Mutant]]:
    """The record a sampled run is checked against (read when given) and the mutants to run:
    all of them, or the stratified sample of the ones the record scored."""
    if sample is None:
        return None, list(everything)
    record = read_record(score_file, fingerprint_) if score_file is not None else None
    pool = record.scored(everything) if record is not None else everything
    return record, stratified_sample(pool, sample, seed_text(fingerprint_, seed))


def failures(
    score: float, threshold: float | None, record: Record | None, full_threshold: float | None, view: SliceView
) -> list[str]:
    """Why the run fails, one line each (empty when it passes)."""
    found = []
    if threshold is not None and score < threshold:
        found.append(f"mutation score {score:.1f}% is below the threshold {threshold:g}%")
    if full_threshold is not None and record is not None and record.score < full_threshold:
        found.append(f"the recorded full score {record.score:.1f}% is below {full_threshold:g}%")
    if view.disagreements:
        where = ", ".join(r.mutant.key for r in view.disagreements[:3])
        found.append(f"{len(view.disagreements)} sampled mutants the record counts as killed survived ({where})")
    return found
