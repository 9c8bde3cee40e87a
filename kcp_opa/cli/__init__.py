"""The ``kcp-opa`` command: a thin layer of argument parsing and output over the library.

Exit codes: 0 success; 1 a manifest, matrix or action is invalid; 2 usage or I/O error
(unreadable file, bad bundle, compile conflict); 3 an internal error (a bug: please report it);
4 (``decide --enforce`` only) the decision does not allow execution.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable, Sequence

import click

from kcp_opa.cli.output import EXIT_INTERNAL, EXIT_INVALID, EXIT_UNAVAILABLE, EXIT_USAGE, fail
from kcp_opa.core.errors import (
    ActionRejectedError,
    KcpOpaError,
    ManifestIntegrityError,
    SourceError,
    StoreUnavailableError,
    ValidationFailedError,
)
from kcp_opa.core.logsetup import configure


def _audit() -> click.Command:
    """The audit group with the commands its siblings define (case files, the report, proofs)."""
    from kcp_opa.cli.audit import audit
    from kcp_opa.cli.auditcase import audit_case, audit_report
    from kcp_opa.cli.auditconsumes import COMMANDS as CONSUME_COMMANDS
    from kcp_opa.cli.auditproofs import COMMANDS as PROOF_COMMANDS
    from kcp_opa.cli.ledgerarg import audit_dump

    for command in (audit_case, audit_report, audit_dump, *PROOF_COMMANDS, *CONSUME_COMMANDS):
        audit.add_command(command)
    return audit


def _serve() -> click.Command:
    from kcp_opa.cli.serve import serve
    from kcp_opa.cli.tokens import serve_group

    return serve_group(serve)


def _from(module: str, attribute: str) -> Callable[[], click.Command]:
    def load() -> click.Command:
        command: click.Command = getattr(importlib.import_module(f"kcp_opa.cli.{module}"), attribute)
        return command

    return load


#: Every command, in pipeline order (declarations, decisions, receipts, authoring, audit), and
#: where it is defined: a command's module is imported only when that command runs (or --help
#: lists it), so `kcp-opa decide` does not load the analysis or the service.
COMMANDS: dict[str, Callable[[], click.Command]] = {
    "validate": _from("declare", "validate"),
    "explain": _from("declare", "explain"),
    "compile": _from("declare", "compile_command"),
    "inspect": _from("declare", "inspect"),
    "bundle": _from("bundlekeys", "bundle"),
    "decide": _from("decide", "decide"),
    "eval": _from("decide", "eval_command"),
    "controls": _from("controls", "controls"),
    "facts": _from("facts", "facts"),
    "receipt": _from("receipt", "receipt"),
    "executions": _from("executions", "executions"),
    "exceptions": _from("exceptions", "exceptions"),
    "store": _from("store", "store"),
    "test": _from("authoring", "test_command"),
    "mutate": _from("mutation", "mutate_command"),
    "check": _from("authoring", "check"),
    "generate": _from("generate", "generate"),
    "prove": _from("analysis", "prove_command"),
    "diff": _from("analysis", "diff_command"),
    "cases": _from("analysis", "cases_group"),
    "ropa": _from("audit", "ropa"),
    "audit": _audit,
    "witness": _from("witness", "witness"),
    "serve": _serve,
}


class _LazyGroup(click.Group):
    """A group whose commands are loaded by name, on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in COMMANDS:
            try:
                command = COMMANDS[cmd_name]()
            except ImportError as exc:  # one command's missing module never takes the others (or --help) down
                command = _unavailable(cmd_name, exc)
            self.add_command(command, cmd_name)
        return self.commands.get(cmd_name)


def _unavailable(name: str, exc: ImportError) -> click.Command:
    reason = f"{type(exc).__name__}: {exc}"

    def refuse() -> None:
        raise click.ClickException(f"`kcp-opa {name}` is unavailable here ({reason}); reinstall kcp-opa")

    return click.Command(name, callback=refuse, help=f"(unavailable: {reason})")


@click.group(cls=_LazyGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
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


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point: every deliberate failure is one line on stderr and an exit code."""
    run: Callable[..., object] = cli.main
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
