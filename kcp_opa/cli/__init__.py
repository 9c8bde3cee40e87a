"""The ``kcp-opa`` command: a thin layer of argument parsing and output over the library.

Exit codes: 0 success; 1 a manifest, matrix or action is invalid; 2 usage or I/O error
(unreadable file, bad bundle, compile conflict); 3 an internal error (a bug: please report it);
4 (``decide --enforce`` only) the decision does not allow execution.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

import click

from kcp_opa.cli.analysis import cases_group, diff_command, prove_command
from kcp_opa.cli.audit import audit, ropa
from kcp_opa.cli.auditcase import audit_case, audit_report
from kcp_opa.cli.auditproofs import COMMANDS as PROOF_COMMANDS
from kcp_opa.cli.authoring import check, test_command
from kcp_opa.cli.bundlekeys import bundle
from kcp_opa.cli.controls import controls
from kcp_opa.cli.decide import decide, eval_command
from kcp_opa.cli.declare import compile_command, explain, inspect, validate
from kcp_opa.cli.exceptions import exceptions
from kcp_opa.cli.executions import executions
from kcp_opa.cli.facts import facts
from kcp_opa.cli.generate import generate
from kcp_opa.cli.ledgerarg import audit_dump
from kcp_opa.cli.mutation import mutate_command
from kcp_opa.cli.output import EXIT_INTERNAL, EXIT_INVALID, EXIT_UNAVAILABLE, EXIT_USAGE, fail
from kcp_opa.cli.receipt import receipt
from kcp_opa.cli.serve import serve
from kcp_opa.cli.store import store
from kcp_opa.cli.tokens import serve_group
from kcp_opa.cli.witness import witness
from kcp_opa.core.errors import (
    ActionRejectedError,
    KcpOpaError,
    ManifestIntegrityError,
    SourceError,
    StoreUnavailableError,
    ValidationFailedError,
)
from kcp_opa.core.logsetup import configure


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


#: Every command, in pipeline order: declarations, decisions, receipts, authoring, audit.
COMMANDS = (
    validate,
    explain,
    compile_command,
    inspect,
    bundle,
    decide,
    eval_command,
    controls,
    facts,
    receipt,
    executions,
    exceptions,
    store,
    test_command,
    mutate_command,
    check,
    generate,
    prove_command,
    diff_command,
    cases_group,
    ropa,
    audit,
    witness,
    serve_group(serve),
)
for _command in COMMANDS:
    cli.add_command(_command)
audit.add_command(audit_case)
audit.add_command(audit_report)
audit.add_command(audit_dump)
for _command in PROOF_COMMANDS:
    audit.add_command(_command)


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
    except click.Abort:  # click's form of Ctrl-C (KeyboardInterrupt) inside a command
        click.echo("kcp-opa: interrupted", err=True)
        sys.exit(130)
    except ValidationFailedError as exc:
        lines = exc.errors
        click.echo(f"kcp-opa: error: {exc.file} {getattr(exc, 'heading', 'is invalid')}:", err=True)
        for line in lines[:20]:
            click.echo(f"  {line}", err=True)
        if len(lines) > 20:
            click.echo(f"  ... and {len(lines) - 20} more (run `kcp-opa validate {exc.file}`)", err=True)
        sys.exit(EXIT_INVALID)
    except SourceError as exc:
        fail(str(exc), EXIT_INVALID if type(exc) is SourceError else EXIT_USAGE)
    except ActionRejectedError as exc:
        fail(f"action refused, nothing evaluated: {exc}", EXIT_INVALID)
    except ManifestIntegrityError as exc:
        fail(str(exc), EXIT_INVALID)
    except StoreUnavailableError as exc:  # an outage: neither a decision nor a usage error
        fail(f"store_unavailable: {exc}", EXIT_UNAVAILABLE)
    except KcpOpaError as exc:
        fail(str(exc), EXIT_USAGE)
    except KeyboardInterrupt:
        click.echo("kcp-opa: interrupted", err=True)
        sys.exit(130)
    except BrokenPipeError:
        sys.stderr.close()
        sys.exit(0)
    except Exception as exc:  # the last line of defence: no traceback for users
        if os.environ.get("KCP_OPA_DEBUG"):
            raise
        fail(
            f"internal error: {type(exc).__name__}: {exc} (set KCP_OPA_DEBUG=1 for a traceback)",
            EXIT_INTERNAL,
        )
