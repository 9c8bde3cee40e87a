"""The ``kcp-opa`` command: a thin layer of argument parsing and output over the library.

Exit codes: 0 success; 1 a manifest, matrix or action is invalid; 2 usage or I/O error
(unreadable file, bad bundle, compile conflict); 3 an internal error (a bug: please report it);
4 (``decide --enforce`` only) the decision does not allow execution.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from kcp_opa import render
from kcp_opa.action import action_hash, parse_action
from kcp_opa.auditor import export_decision, query, replay
from kcp_opa.bundle import read_bundle, write_atomically
from kcp_opa.caserun import run_cases
from kcp_opa.cases import case_files, load_cases
from kcp_opa.compiler import compile_bundle, default_output
from kcp_opa.diagnostics import Report
from kcp_opa.effective import effective_unit
from kcp_opa.errors import (
    ActionRejectedError,
    CodedError,
    KcpOpaError,
    KeyringError,
    ReceiptIssueError,
    SourceError,
    SourceUnreadableError,
    ValidationFailedError,
)
from kcp_opa.gate import Gate, decision_time
from kcp_opa.ledger import AuditLedger, verify_ledger
from kcp_opa.logsetup import configure
from kcp_opa.manifest import load_manifest, validate_manifest
from kcp_opa.matrix import validate_matrix
from kcp_opa.policycheck import check_modules
from kcp_opa.query import evaluate_query
from kcp_opa.receipts import issue_receipt, verify_receipt
from kcp_opa.regotest import Outcome, discover, load_modules, run_tests
from kcp_opa.ropa import build_ropa, to_markdown
from kcp_opa.signing import Keyring, generate_ed25519, hmac_key_from_env, load_keyring
from kcp_opa.store import SQLiteStore
from kcp_opa.testreport import junit_xml, policy_coverage, print_report, to_dict
from kcp_opa.yamlsource import DEFAULT_MAX_BYTES

EXIT_INVALID = 1
EXIT_USAGE = 2
EXIT_INTERNAL = 3
EXIT_NOT_ALLOWED = 4
MATRIX_KIND = "kcp-opa/delegation-matrix"

FORMAT = click.option(
    "--format",
    "fmt",
    type=click.Choice(["text", "json"]),
    default=None,
    help="Output format. Default: text on a terminal, json when piped.",
)
MAX_BYTES = click.option(
    "--max-bytes",
    type=click.IntRange(min=1),
    default=DEFAULT_MAX_BYTES,
    show_default=True,
    help="Refuse YAML files larger than this.",
)


def _as_json(fmt: str | None) -> bool:
    return fmt == "json" or (fmt is None and not sys.stdout.isatty())


def _fail(message: str, code: int) -> None:
    click.echo(f"kcp-opa: error: {message}", err=True)
    sys.exit(code)


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(package_name="kcp-opa")
@click.option("-v", "--verbose", count=True, help="More log output on stderr (-v info, -vv debug).")
def cli(verbose: int) -> None:
    """Turn KCP compliance declarations into OPA bundles that decide what AI agents may do.

    \b
    Typical flow:
      kcp-opa validate knowledge.yaml matrix.yaml      # check the declarations
      kcp-opa explain knowledge.yaml my_unit           # see what applies to one unit, and why
      kcp-opa compile knowledge.yaml --matrix matrix.yaml --policies policies/
      kcp-opa inspect bundles/knowledge.tar.gz         # what a bundle contains
      kcp-opa decide -b bundles/finance.tar.gz -i action.json    # one gate decision
      kcp-opa eval -b BUNDLE -i input.json 'data.kcp.gate.decision'   # replay, like opa eval
    """
    configure(verbose)


@cli.command()
@click.argument("files", nargs=-1, required=True, type=click.Path(path_type=Path))
@FORMAT
@MAX_BYTES
@click.option("--strict", is_flag=True, help="Treat warnings as errors (exit 1 on any warning).")
def validate(files: Sequence[Path], fmt: str | None, max_bytes: int, strict: bool) -> None:
    """Validate KCP manifests (and delegation matrices, recognised by their `kind`).

    Every finding names the file, the YAML path and the line. Exit 0 when all are valid,
    1 when one is invalid, 2 when a file cannot be read.
    """
    reports: list[Report[Any]] = []
    unreadable: list[str] = []
    for path in files:
        try:
            reports.append(_validate_one(path, max_bytes))
        except KcpOpaError as exc:
            unreadable.append(str(exc))
    if _as_json(fmt):
        payload = [r.to_dict() for r in reports]
        render.print_json(payload[0] if len(files) == 1 and payload else payload)
    else:
        render.reports(Console(), reports)
    for message in unreadable:
        click.echo(f"kcp-opa: error: {message}", err=True)
    if unreadable:
        sys.exit(EXIT_USAGE)
    if any(not r.valid or (strict and r.warnings) for r in reports):
        sys.exit(EXIT_INVALID)


def _validate_one(path: Path, max_bytes: int) -> Report[Any]:
    if _looks_like_matrix(path):
        return validate_matrix(path, max_bytes=max_bytes)
    return validate_manifest(path, max_bytes=max_bytes)


def _looks_like_matrix(path: Path) -> bool:
    try:
        with path.open("rb") as handle:
            head = handle.read(4096)
    except OSError:
        return False
    return MATRIX_KIND.encode() in head


@cli.command()
@click.argument("manifest", type=click.Path(path_type=Path))
@click.argument("unit")
@FORMAT
@MAX_BYTES
def explain(manifest: Path, unit: str, fmt: str | None, max_bytes: int) -> None:
    """Show the effective compliance, delegation, trust and freshness of UNIT, and where each
    value came from (root, unit or default)."""
    loaded = load_manifest(manifest, max_bytes=max_bytes)
    resolved = effective_unit(loaded, unit)
    if _as_json(fmt):
        render.print_json(
            {
                "project": resolved.project,
                "unit": resolved.unit_id,
                "effective": resolved.to_data(),
                "sources": {name: s.source for name, s in resolved.fields.items()},
            }
        )
    else:
        render.effective(Console(), resolved)


@cli.command(name="compile")
@click.argument("manifests", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option(
    "--matrix",
    "matrix",
    required=True,
    type=click.Path(path_type=Path),
    help="The delegation matrix YAML.",
)
@click.option(
    "--policies",
    type=click.Path(path_type=Path, file_okay=False),
    default=Path("policies"),
    show_default=True,
    help="Directory of .rego modules (*_test.rego files are left out of the bundle).",
)
@click.option(
    "-o",
    "--output",
    type=click.Path(path_type=Path, dir_okay=False),
    help="Bundle path [default: bundles/<name>.tar.gz].",
)
@click.option("--revision", help="Bundle revision [default: a sha256 of the bundle's content].")
@click.option("--policy-version", help="Policy version [default: the policies directory's VERSION file].")
@click.option(
    "--engine-check/--no-engine-check",
    default=True,
    show_default=True,
    help="Check in a child process that regopy can load and plan the bundle.",
)
@FORMAT
@MAX_BYTES
def compile_command(
    manifests: Sequence[Path],
    matrix: Path,
    policies: Path,
    output: Path | None,
    revision: str | None,
    policy_version: str | None,
    engine_check: bool,
    fmt: str | None,
    max_bytes: int,
) -> None:
    """Compile MANIFESTS and a delegation matrix with the Rego policies into an OPA bundle.

    The bundle is byte-for-byte deterministic: the same inputs give the same sha256. It is
    written atomically (a failed compile, engine check included, leaves any earlier bundle at
    the output path untouched) and loads with `opa eval -b`.
    """
    target = output or default_output(manifests)
    result = compile_bundle(
        manifests,
        matrix,
        policies,
        target,
        revision=revision,
        policy_version_override=policy_version,
        max_bytes=max_bytes,
        engine_check=engine_check,
    )
    if _as_json(fmt):
        render.print_json(result.to_dict())
    else:
        render.compiled(Console(), result)


@cli.command()
@click.argument("bundle", type=click.Path(path_type=Path, dir_okay=False))
@FORMAT
def inspect(bundle: Path, fmt: str | None) -> None:
    """Show what a compiled bundle contains: revision, sources, evaluators, entrypoints."""
    loaded = read_bundle(bundle)
    if _as_json(fmt):
        render.print_json({"file": str(bundle), "sha256": loaded.sha256, "manifest": loaded.manifest})
    else:
        render.bundle_summary(Console(), loaded.manifest, loaded.sha256, str(bundle))


def _read_text(path: str, what: str) -> str:
    """Read a file, or stdin for '-'; size is checked by the caller's parser."""
    if path == "-":
        return sys.stdin.read()
    try:
        return Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise ActionRejectedError("", f"{what} {path} is not UTF-8 text") from None
    except OSError as exc:
        raise SourceUnreadableError(path, f"cannot read {what}: {exc.strerror or exc}") from None


@cli.command()
@click.option(
    "-b",
    "--bundle",
    "bundle",
    required=True,
    type=click.Path(path_type=Path, dir_okay=False),
    help="Bundle written by `kcp-opa compile`.",
)
@click.option(
    "-i",
    "--input",
    "input_path",
    required=True,
    metavar="ACTION.json",
    help="The action intent (JSON); '-' reads stdin.",
)
@click.option("--now", metavar="RFC3339", help="Decision time [default: the current time, UTC].")
@click.option(
    "--with-input",
    is_flag=True,
    help="Print {input, decision}: the exact input evaluated, ready for `eval`/`opa eval`.",
)
@click.option("--enforce", is_flag=True, help="Exit 4 when the decision does not allow execution.")
@click.option(
    "--ledger",
    type=click.Path(path_type=Path, dir_okay=False),
    help="Append the decision to this audit ledger (JSON Lines; fsynced before printing).",
)
def decide(
    bundle: Path, input_path: str, now: str | None, with_input: bool, enforce: bool, ledger: Path | None
) -> None:
    """Decide one action with the bundle's policy and print the decision JSON.

    \b
    Exit codes:
      0  a decision was made (read `decision` and `execution_allowed`)
      1  the action was refused before evaluation (float, secret key, bad shape...)
      2  usage error, unreadable file or unusable bundle
      3  internal error
      4  with --enforce: the decision does not allow execution
    An engine failure is not an exit code: it is a DENY with reason `engine_error`.
    """
    action = parse_action(_read_text(input_path, "action"))
    gate = Gate.from_bundle(bundle, ledger=AuditLedger(ledger) if ledger is not None else None)
    prepared = gate.prepare(action, now=now)
    decision = gate.decide_prepared(prepared)
    document = decision.to_dict()
    render.print_json({"input": prepared.document, "decision": document} if with_input else document)
    if enforce and not decision.execution_allowed:
        sys.exit(EXIT_NOT_ALLOWED)


@cli.command(name="eval")
@click.option(
    "-b",
    "--bundle",
    "bundle",
    required=True,
    type=click.Path(path_type=Path, dir_okay=False),
    help="Bundle (e.g. the revision an archived decision names).",
)
@click.option("-i", "--input", "input_path", metavar="INPUT.json", help="The input document; '-' reads stdin.")
@click.option(
    "-f",
    "--format",
    "fmt",
    type=click.Choice(["json", "values"]),
    default="json",
    show_default=True,
    help="json: opa eval's result document; values: the expression values only.",
)
@click.argument("query")
def eval_command(bundle: Path, input_path: str | None, fmt: str, query: str) -> None:
    """Evaluate QUERY over a bundle with regopy, answering as `opa eval -b BUNDLE -i INPUT QUERY` does.

    For auditors without OPA: replay an archived input against the bundle revision it names,
    e.g. `kcp-opa eval -b bundle.tar.gz -i input.json data.kcp.gate.decision`.
    An undefined query prints {} (as opa eval does); an evaluation error exits 2.
    """
    loaded = read_bundle(bundle)
    input_doc = None
    if input_path is not None:
        text = _read_text(input_path, "input")
        try:
            input_doc = json.loads(text)
        except (json.JSONDecodeError, RecursionError) as exc:
            raise ActionRejectedError("", f"input {input_path} is not valid JSON: {exc}") from None
    render.print_json(evaluate_query(loaded, query, input_doc, values_only=fmt == "values"))


def _receipt_errors(fn: Callable[..., None]) -> Callable[..., None]:
    """Receipt commands answer like the KYA reference script: JSON errors on stderr, exit 2."""
    import functools

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> None:
        try:
            fn(*args, **kwargs)
        except CodedError as exc:
            click.echo(json.dumps({"ok": False, "error": str(exc), "code": exc.code}), err=True)
            sys.exit(EXIT_USAGE)
        except KcpOpaError as exc:
            click.echo(json.dumps({"ok": False, "error": str(exc), "code": "invalid_input"}), err=True)
            sys.exit(EXIT_USAGE)

    return wrapper


def _load_json(path: str, what: str) -> Any:
    text = _read_text(path, what)
    try:
        return json.loads(text)
    except (json.JSONDecodeError, RecursionError) as exc:
        raise ReceiptIssueError(f"{what} {path} is not valid JSON: {exc}", "invalid_json") from None


def _keyring_for(keyring_path: Path | None, secret_env: str, kid: str) -> Keyring:
    if keyring_path is not None:
        return load_keyring(keyring_path)
    return Keyring({kid: hmac_key_from_env(kid, secret_env)}, kid)


def _key_options(*, keyring_help: str) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """The key flags `receipt issue` and `receipt verify` share (the KYA script's, plus --keyring)."""

    def decorate(fn: Callable[..., None]) -> Callable[..., None]:
        fn = click.option(
            "--keyring", "keyring_path", type=click.Path(path_type=Path, dir_okay=False), help=keyring_help
        )(fn)
        fn = click.option("--kid", default="default", show_default=True, help="Key id of the HMAC secret.")(fn)
        return click.option(
            "--secret-env",
            default="KYA_RECEIPT_SECRET",
            show_default=True,
            help="Environment variable holding the HMAC secret (>= 32 bytes); never the secret itself.",
        )(fn)

    return decorate


@cli.group()
def receipt() -> None:
    """Signed one-time delegation receipts (the KYA reference script's verbs and flags).

    \b
    HMAC-SHA256 (KYA-compatible): the secret comes from an environment variable
    (--secret-env, default KYA_RECEIPT_SECRET), never from the command line.
    Ed25519: --keyring FILE (see `kcp-opa receipt keygen`); an executor given the
    public keyring can verify but not issue. Errors: {"ok": false, "error", "code"}
    on stderr, exit 2.
    """


@receipt.command(name="hash")
@click.option("--action", "action_path", required=True, metavar="ACTION.json", help="The action intent.")
@_receipt_errors
def receipt_hash(action_path: str) -> None:
    """Print the action's KYA-CJ-1 hash."""
    action = parse_action(_read_text(action_path, "action"))
    render.print_json({"ok": True, "action_hash": action_hash(action)})


@receipt.command(name="issue")
@click.option("--action", "action_path", required=True, metavar="ACTION.json", help="The action intent.")
@click.option(
    "--decision",
    "decision_path",
    required=True,
    metavar="DECISION.json",
    help="A KYA gate decision document (with control_evidence), from this or another gate.",
)
@_key_options(keyring_help="Sign with the keyring's signing key instead (Ed25519 or HMAC).")
@click.option("--ttl-seconds", type=int, help="Receipt lifetime, 30..900 [default: the decision's, else 300].")
@click.option("--output", type=click.Path(path_type=Path, dir_okay=False), help="Write the receipt here.")
@click.option("--now", metavar="RFC3339", help="Issue time [default: now].")
@_receipt_errors
def receipt_issue(
    action_path: str,
    decision_path: str,
    secret_env: str,
    kid: str,
    keyring_path: Path | None,
    ttl_seconds: int | None,
    output: Path | None,
    now: str | None,
) -> None:
    """Issue a receipt: only for an APPROVED decision whose required controls all PASSED."""
    action = parse_action(_read_text(action_path, "action"))
    decision = _load_json(decision_path, "decision")
    if not isinstance(decision, dict):
        raise ReceiptIssueError("a decision document is a JSON object", "invalid_json")
    key = _keyring_for(keyring_path, secret_env, kid).signer()
    issued = issue_receipt(decision, action, key, ttl_seconds=ttl_seconds, now=decision_time(now) if now else None)
    if output is not None:
        write_atomically(output, json.dumps(issued, indent=2).encode("utf-8") + b"\n")
    render.print_json(issued)


@receipt.command(name="verify")
@click.option("--action", "action_path", required=True, metavar="ACTION.json", help="The final action intent.")
@click.option("--receipt", "receipt_path", required=True, metavar="RECEIPT.json", help="The receipt.")
@click.option(
    "--policy-version",
    "policy_versions",
    required=True,
    multiple=True,
    help="An active policy version (repeat for several during a rollout).",
)
@_key_options(keyring_help="Trust the keys in this keyring (e.g. Ed25519 public keys) instead.")
@click.option(
    "--nonce-db",
    type=click.Path(path_type=Path, dir_okay=False),
    help="Consume the receipt in this SQLite store (without it: verify only, nothing consumed).",
)
@click.option("--now", metavar="RFC3339", help="Verification time [default: now].")
@_receipt_errors
def receipt_verify(
    action_path: str,
    receipt_path: str,
    policy_versions: tuple[str, ...],
    secret_env: str,
    kid: str,
    keyring_path: Path | None,
    nonce_db: Path | None,
    now: str | None,
) -> None:
    """Verify a receipt in the contract's order; with --nonce-db, consume it atomically."""
    action = parse_action(_read_text(action_path, "action"))
    candidate = _load_json(receipt_path, "receipt")
    keyring = _keyring_for(keyring_path, secret_env, kid)
    store = SQLiteStore(nonce_db) if nonce_db is not None else None
    verified = verify_receipt(
        candidate,
        action,
        keyring=keyring,
        policy_versions=set(policy_versions),
        nonce_store=store,
        now=decision_time(now) if now else None,
    )
    render.print_json({"ok": True, "receipt_id": verified.receipt["receipt_id"], "consumed": verified.consumed})


@receipt.command(name="keygen")
@click.option("--kid", required=True, help="Key id for the new Ed25519 key.")
@click.option(
    "--keyring",
    "keyring_path",
    required=True,
    type=click.Path(path_type=Path, dir_okay=False),
    help="Private keyring file (created, or extended: the new key becomes the signer).",
)
@click.option(
    "--public",
    "public_path",
    type=click.Path(path_type=Path, dir_okay=False),
    help="Also write the public keyring here, for executors.",
)
@click.option("--retire", multiple=True, metavar="KID", help="Retire this kid (it stops verifying).")
@_receipt_errors
def receipt_keygen(kid: str, keyring_path: Path, public_path: Path | None, retire: tuple[str, ...]) -> None:
    """Add an Ed25519 key and make it the signer; rotate by adding, then retiring the old kid."""
    existing = load_keyring(keyring_path) if keyring_path.exists() else Keyring({}, None)
    if kid in existing.keys:
        raise KeyringError(f"kid {kid} is already in {keyring_path}", "duplicate_kid")
    keys = dict(existing.keys)
    keys[kid] = generate_ed25519(kid)
    for old in retire:
        if old not in keys:
            raise KeyringError(f"cannot retire {old}: not in the keyring", "unknown_kid")
        keys[old] = dataclasses.replace(keys[old], retired=True)
    ring = Keyring(keys, kid)
    write_atomically(keyring_path, json.dumps(ring.to_file_dict(include_private=True), indent=2).encode() + b"\n")
    keyring_path.chmod(0o600)
    if public_path is not None:
        write_atomically(public_path, json.dumps(ring.public().to_file_dict(include_private=False), indent=2).encode())
    render.print_json({"ok": True, "signing_kid": kid, "kids": sorted(keys), "retired": sorted(retire)})


@cli.command(name="test")
@click.argument("paths", nargs=-1, type=click.Path(path_type=Path))
@click.option("--run", "run_regex", metavar="REGEX", help="Only tests (data.pkg.test_x) and cases matching REGEX.")
@click.option("-v", "--verbose", "verbose", is_flag=True, help="Every test with its engines' details.")
@click.option("--engines", default="regopy,opa", show_default=True, help="Comma-separated: regopy, opa.")
@click.option(
    "--cases",
    "cases_dir",
    type=click.Path(path_type=Path, file_okay=False),
    help="Decision-case YAML files to run [default: fixtures/cases if it exists].",
)
@click.option(
    "--deployments",
    "deployments_dir",
    type=click.Path(path_type=Path, file_okay=False),
    default=Path("fixtures/deployments"),
    show_default=True,
    help="Where each case's deployment (knowledge.yaml, matrix.yaml) lives.",
)
@click.option("--no-cases", is_flag=True, help="Rego tests only.")
@click.option("--coverage", is_flag=True, help="Report policy line coverage (OPA reference engine).")
@click.option("--threshold", type=click.FloatRange(0, 100), help="With --coverage: fail below this percentage.")
@click.option(
    "--fail-on-false-allow/--no-fail-on-false-allow",
    default=True,
    show_default=True,
    help="A case that must not execute but would fails the run.",
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["text", "json"]),
    default=None,
    help="Output format. Default: text on a terminal, json when piped.",
)
@click.option("--junit", type=click.Path(path_type=Path, dir_okay=False), help="Also write JUnit XML here.")
def test_command(
    paths: Sequence[Path],
    run_regex: str | None,
    verbose: bool,
    engines: str,
    cases_dir: Path | None,
    deployments_dir: Path,
    no_cases: bool,
    coverage: bool,
    threshold: float | None,
    fail_on_false_allow: bool,
    fmt: str | None,
    junit: Path | None,
) -> None:
    """Run Rego tests (`test_*` in *_test.rego) on regopy and OPA, then the decision cases.

    \b
    Like `opa test`: exit 0 when everything passes, 2 on any failure, error, engine
    divergence, false allow or coverage below --threshold. A test that aborts regopy is an
    ERROR that names the construct, never a crash of the runner.
    \b
    Examples:
      kcp-opa test policies/                        # tests + fixtures/cases + metrics
      kcp-opa test policies/ --coverage --threshold 90 --junit report.xml
      kcp-opa test policies/ --run residency -v
    """
    targets = list(paths) or [Path("policies")]
    wanted = tuple(e.strip() for e in engines.split(",") if e.strip())
    unknown = set(wanted) - {"regopy", "opa"}
    if unknown or not wanted:
        raise click.BadParameter(f"unknown engine(s) {', '.join(sorted(unknown)) or '(none)'}", param_hint="--engines")
    try:
        modules = load_modules(targets)
    except (OSError, UnicodeDecodeError) as exc:
        raise SourceUnreadableError(str(targets[0]), f"cannot read policies: {exc}") from None
    tests = discover(modules, run_regex)
    results, test_coverage = run_tests(modules, tests, wanted, coverage=coverage)
    case_run = None
    directory = cases_dir or (Path("fixtures/cases") if Path("fixtures/cases").is_dir() else None)
    policy_dirs = [t for t in targets if t.is_dir()]
    if not no_cases and directory is not None and policy_dirs:
        cases = [case for path in case_files(directory) for case in load_cases(path)]
        if run_regex:
            cases = [c for c in cases if re.search(run_regex, c.case_id)]
        case_run = run_cases(cases, policy_dirs[0], deployments_dir, wanted, coverage=coverage)
    covered = policy_coverage(test_coverage, case_run.coverage if case_run else None) if coverage else None
    if junit is not None:
        write_atomically(junit, junit_xml(results, case_run))
    if _as_json(fmt):
        render.print_json(to_dict(results, case_run, covered))
    else:
        print_report(Console(), results, case_run, covered, verbose=verbose)
    failed = any(r.outcome in {Outcome.FAIL, Outcome.ERROR} for r in results)
    if case_run is not None:
        metrics = case_run.metrics()
        failed = failed or metrics["passed"] != metrics["cases"]
        failed = failed or (fail_on_false_allow and bool(metrics["false_allows"]))
    if coverage and threshold is not None and (covered is None or covered["coverage"] < threshold):
        shown = "no coverage" if covered is None else f"{covered['coverage']:.1f}%"
        click.echo(f"kcp-opa: coverage {shown} is below the threshold {threshold:g}%", err=True)
        failed = True
    if failed:
        sys.exit(EXIT_USAGE)


@cli.command()
@click.argument("paths", nargs=-1, type=click.Path(path_type=Path))
@click.option(
    "--bundle",
    type=click.Path(path_type=Path, dir_okay=False),
    help="Also check the policies against this bundle's data (shadowed rules).",
)
@click.option("--strict", is_flag=True, help="Warnings fail the check too (exit 1).")
@FORMAT
def check(paths: Sequence[Path], bundle: Path | None, strict: bool, fmt: str | None) -> None:
    """Compile every module on OPA and regopy and flag the constructs engine-notes.md lists.

    Exit 1 on any error (or, with --strict, any warning); 0 otherwise.
    """
    targets = list(paths) or [Path("policies")]
    try:
        modules = load_modules(targets)
    except (OSError, UnicodeDecodeError) as exc:
        raise SourceUnreadableError(str(targets[0]), f"cannot read policies: {exc}") from None
    data = read_bundle(bundle).data if bundle is not None else None
    findings = check_modules(modules, data=data)
    errors = [f for f in findings if f.severity == "error"]
    if _as_json(fmt):
        render.print_json({"modules": len(modules), "findings": [f.to_dict() for f in findings]})
    else:
        console = Console()
        for finding in findings:
            style = "bold red" if finding.severity == "error" else "yellow"
            console.print(
                f"[{style}]{finding.severity}[/] {finding.file}:{finding.line}: {finding.message} ({finding.code})",
                highlight=False,
            )
        console.print(f"{len(modules)} modules: {len(errors)} errors, {len(findings) - len(errors)} warnings")
    if errors or (strict and findings):
        sys.exit(EXIT_INVALID)


@cli.command()
@click.argument("manifests", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--format", "fmt", type=click.Choice(["json", "markdown"]), default="json", show_default=True)
@click.option("-o", "--output", type=click.Path(path_type=Path, dir_okay=False), help="Write here instead of stdout.")
@MAX_BYTES
def ropa(manifests: Sequence[Path], fmt: str, output: Path | None, max_bytes: int) -> None:
    """GDPR Article 30 records of processing from KCP manifests (one record per personal-data unit).

    Units missing a field get "not declared" and a warning on stderr, never a silent gap.
    """
    loaded = [load_manifest(path, max_bytes=max_bytes) for path in manifests]
    records = build_ropa(loaded)
    text = to_markdown(records) if fmt == "markdown" else json.dumps(records, indent=2, ensure_ascii=False) + "\n"
    for warning in records["warnings"]:
        click.echo(f"kcp-opa: warning: {warning}", err=True)
    if output is not None:
        write_atomically(output, text.encode("utf-8"))
    else:
        click.echo(text, nl=False)


@cli.group()
def audit() -> None:
    """The auditor's tools over a ledger written by the gate (verify, export, replay, query)."""


@audit.command(name="verify")
@click.argument("ledger", type=click.Path(path_type=Path, dir_okay=False))
@FORMAT
def audit_verify(ledger: Path, fmt: str | None) -> None:
    """Check the hash chain and every line; report the first break with its line number (exit 1)."""
    report = verify_ledger(ledger)
    document = {
        "ledger": str(ledger),
        "ok": report.ok,
        "entries": report.entries,
        "torn_tail": report.torn_tail,
        "problems": [{"line": p.line, "message": p.message} for p in report.problems],
    }
    if _as_json(fmt):
        render.print_json(document)
    else:
        console = Console()
        if report.ok:
            console.print(f"[green]ok[/] {ledger}: {report.entries} entries, chain intact")
        for problem in report.problems:
            verified = f"{report.entries} entries verified before it"
            console.print(f"[red]broken[/] {ledger}:{problem.line}: {problem.message} ({verified})")
    if not report.ok:
        sys.exit(EXIT_INVALID)


@audit.command(name="export")
@click.argument("ledger", type=click.Path(path_type=Path, dir_okay=False))
@click.option("--decision-id", required=True, help="The decision to export.")
@click.option(
    "--bundles",
    "bundles_dir",
    type=click.Path(path_type=Path, file_okay=False),
    default=Path("bundles"),
    show_default=True,
    help="Where to find the bundle revision the decision names.",
)
@click.option(
    "-o",
    "--output",
    required=True,
    type=click.Path(path_type=Path, file_okay=False),
    help="Directory for input.json, result.json, the bundle and a README.",
)
def audit_export(ledger: Path, decision_id: str, bundles_dir: Path, output: Path) -> None:
    """Export one decision so it can be re-run with `opa eval -b <bundle> -i input.json`."""
    out = export_decision(ledger, decision_id, bundles_dir, output)
    render.print_json({"ok": True, "output": str(out), "files": sorted(p.name for p in out.iterdir())})


@audit.command(name="replay")
@click.argument("ledger", type=click.Path(path_type=Path, dir_okay=False))
@click.option(
    "--bundles",
    "bundles_dir",
    type=click.Path(path_type=Path, file_okay=False),
    default=Path("bundles"),
    show_default=True,
    help="Directory of bundles; each decision is replayed with the revision it names.",
)
@click.option("--no-opa", is_flag=True, help="Replay on regopy only (default: also on the OPA reference if installed).")
@FORMAT
def audit_replay(ledger: Path, bundles_dir: Path, no_opa: bool, fmt: str | None) -> None:
    """Re-evaluate every archived decision and report any that does not reproduce (exit 1)."""
    report = replay(ledger, bundles_dir, with_opa=not no_opa)
    if _as_json(fmt):
        render.print_json(report.to_dict())
    else:
        console = Console()
        counts = ", ".join(f"{engine} {count}" for engine, count in sorted(report.reproduced.items()))
        console.print(f"{report.decisions} decisions; reproduced: {counts or 'none'}")
        for item in report.mismatches:
            console.print(f"[red]differs[/] line {item['line']} {item['decision_id']} on {item['engine']}")
        for revision, count in report.missing_bundles.items():
            console.print(f"[red]missing bundle[/] revision {revision} ({count} decisions)")
        for erased in report.erased_unverifiable:
            console.print(f"[yellow]erased[/] {erased}: content erased under no-logging; not reproducible")
    if not report.ok:
        sys.exit(EXIT_INVALID)


@audit.command(name="query")
@click.argument("ledger", type=click.Path(path_type=Path, dir_okay=False))
@click.option("--unit", help="project/unit or unit id.")
@click.option("--agent", help="agent_id.")
@click.option("--model", help="runtime model id.")
@click.option("--decision", help="Routing state, e.g. DENY.")
@click.option("--type", "event_type", type=click.Choice(["decision", "control", "receipt", "execution", "failure"]))
@click.option("--since", metavar="RFC3339", help="From this time (UTC, e.g. 2026-11-29T00:00:00Z).")
@click.option("--until", metavar="RFC3339", help="Up to this time.")
@FORMAT
def audit_query(
    ledger: Path,
    unit: str | None,
    agent: str | None,
    model: str | None,
    decision: str | None,
    event_type: str | None,
    since: str | None,
    until: str | None,
    fmt: str | None,
) -> None:
    """Entries matching every filter: "every action by model X on unit Y" is one command."""
    entries = query(
        ledger, unit=unit, agent=agent, model=model, decision=decision, event_type=event_type, since=since, until=until
    )
    if _as_json(fmt):
        render.print_json(entries)
        return
    table = Table(title=f"{len(entries)} entries in {ledger}")
    for column in ("seq", "time", "type", "agent", "unit", "model", "decision", "reasons / detail"):
        table.add_column(column, overflow="fold")
    for entry in entries:
        detail = ", ".join(entry.get("reason_codes") or []) or str(entry.get("code") or entry.get("receipt_id") or "")
        table.add_row(
            str(entry.get("seq")),
            str(entry.get("timestamp", ""))[:19],
            str(entry.get("type")),
            str(entry.get("agent_id") or ""),
            str(entry.get("kcp_unit_applied") or ""),
            str(entry.get("model") or ""),
            str(entry.get("decision") or entry.get("authorization_status") or ""),
            detail,
        )
    console = Console()
    (console if console.is_terminal else Console(width=160)).print(table)


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point: every deliberate failure is one line on stderr and an exit code."""
    run: Callable[..., Any] = cli.main
    try:
        run(args=argv, prog_name="kcp-opa", standalone_mode=False)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.ClickException as exc:
        click.echo(f"kcp-opa: error: {exc.format_message()}", err=True)
        if isinstance(exc, click.UsageError) and exc.ctx is not None:
            click.echo(f"Try '{exc.ctx.command_path} --help'.", err=True)
        sys.exit(EXIT_USAGE)
    except click.Abort:
        _fail("aborted", EXIT_USAGE)
    except ValidationFailedError as exc:
        lines = exc.errors
        click.echo(f"kcp-opa: error: {exc.file} is invalid:", err=True)
        for line in lines[:20]:
            click.echo(f"  {line}", err=True)
        if len(lines) > 20:
            click.echo(f"  ... and {len(lines) - 20} more (run `kcp-opa validate {exc.file}`)", err=True)
        sys.exit(EXIT_INVALID)
    except SourceError as exc:
        _fail(str(exc), EXIT_INVALID if type(exc) is SourceError else EXIT_USAGE)
    except ActionRejectedError as exc:
        _fail(f"action refused, nothing evaluated: {exc}", EXIT_INVALID)
    except KcpOpaError as exc:
        _fail(str(exc), EXIT_USAGE)
    except KeyboardInterrupt:
        click.echo("kcp-opa: interrupted", err=True)
        sys.exit(130)
    except BrokenPipeError:
        sys.stderr.close()
        sys.exit(0)
    except Exception as exc:  # the last line of defence: no traceback for users
        if os.environ.get("KCP_OPA_DEBUG"):
            raise
        _fail(
            f"internal error: {type(exc).__name__}: {exc} (set KCP_OPA_DEBUG=1 for a traceback)",
            EXIT_INTERNAL,
        )
