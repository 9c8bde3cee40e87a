"""regopy, hosted so that no policy and no input can take the agent's process down.

The bundle is checked in a child process first (rego-cpp aborts on some plans; docs/engine-findings.md
hazards 2 and 4), then its data is mounted once, the modules added and the entrypoint built
once. Each thread gets its own ``Interpreter`` over the shared compiled bundle (calls release
the GIL). Every failure of an evaluation (not ok, an exception, undefined, output that is not
one object) comes back as an :class:`EngineResult` with ``error`` set, never as a raise: the
gate turns it into a DENY with reason ``engine_error``.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import tempfile
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import structlog

from kcp_opa.compile.bundle import LoadedBundle
from kcp_opa.core.canonical import canonical_json
from kcp_opa.core.errors import EngineLoadError
from kcp_opa.core.jsonread import JsonObject
from kcp_opa.decide import plancache
from kcp_opa.decide.regoinput import read_results, rego_input

if TYPE_CHECKING:
    from regopy import Bundle, Interpreter

_log = structlog.get_logger("kcp_opa.engine")

DECISION_ENTRYPOINT = "kcp/gate/decision"

#: Builtins a decision policy must not call: they read the clock, the network, randomness or the
#: host environment, so a decision would no longer replay from its archived input (contract
#: principle 5), and ``opa.runtime()`` hands the process environment, secrets included, to policy
#: code (docs/engine-findings.md hazard 9).
NONDETERMINISTIC_BUILTINS = (
    "time.now_ns",
    "http.send",
    "opa.runtime",
    "rand.intn",
    "uuid.rfc4122",
    "net.lookup_ip_addr",
    "crypto.x509.parse_and_verify_certificates",
)
_BUILTIN_CALL = re.compile(r"(?<![\w.])(" + "|".join(re.escape(b) for b in NONDETERMINISTIC_BUILTINS) + r")\s*\(")


def forbidden_builtin_calls(modules: Mapping[str, str]) -> list[str]:
    """``file:line: builtin`` for every call of a builtin that would break replay."""
    found: list[str] = []
    for name, source in sorted(modules.items()):
        for number, line in enumerate(source.splitlines(), start=1):
            code = line.split("#", 1)[0]
            found.extend(f"{name}:{number}: {match.group(1)}" for match in _BUILTIN_CALL.finditer(code))
    return found


_PACKAGE = re.compile(r"^package\s+([\w.]+)", re.MULTILINE)


def shadowed_packages(modules: Mapping[str, str], data: JsonObject) -> list[str]:
    """Package paths that the data document also defines (or defines a prefix of)."""
    found: list[str] = []
    for source in modules.values():
        match = _PACKAGE.search(source)
        if match is None:
            continue
        node: object = data
        parts = match.group(1).split(".")
        for depth, part in enumerate(parts, start=1):
            if not isinstance(node, Mapping) or part not in node:
                break
            node = node[part]
            if depth == len(parts) or not isinstance(node, Mapping):
                found.append(".".join(parts[:depth]))
                break
    return sorted(set(found))


@dataclass(frozen=True)
class EngineResult:
    """One evaluation: ``value`` when the policy answered, ``error`` (one line) when it did not."""

    value: Mapping[str, Any] | None
    error: str | None = None


class Evaluator(Protocol):
    """What a gate evaluates with: in this process (:class:`RegopyEngine`) or in a pool of
    worker processes (kcp_opa.decide.pool.ProcessEngine); ``evaluate`` never raises."""

    bundle: LoadedBundle
    entrypoint: str

    def evaluate(self, input_doc: JsonObject) -> EngineResult: ...

    def close(self) -> None: ...


class RegopyEngine:
    """One bundle's entrypoint, built once, evaluated from any thread."""

    def __init__(
        self,
        bundle: LoadedBundle,
        entrypoint: str = DECISION_ENTRYPOINT,
        *,
        preflight: bool = True,
        plan_cache: Path | None = None,
    ) -> None:
        self.bundle = bundle
        self.entrypoint = entrypoint
        check_manifest(bundle, entrypoint)
        self._local = threading.local()
        cached = self._cache_path(plan_cache)
        copy = None if cached is None else plancache.verified_copy(cached, bundle.sha256, entrypoint)
        if copy is not None:
            # A plan built and saved for this very bundle (sha256-bound) after a preflight and build.
            try:
                self._built = self._load_plan(copy)
            finally:
                copy.unlink(missing_ok=True)
            return
        if preflight:
            self._built = self._preflighted(cached)
            return
        self._built = self._build()
        if cached is not None:
            self._save_plan(cached)

    def _preflighted(self, cached: Path | None) -> Bundle:
        """Plan in a child first (a plan that aborts rego-cpp kills the child, not this process),
        then load the child's plan rather than building a second one here; the plan cache gets
        the child's file (rego-cpp cannot save a plan it loaded)."""
        with tempfile.TemporaryDirectory(prefix="kcp-opa-preflight-") as private:  # mode 0700
            plan = Path(private) / "plan.rbb"
            preflight_in_child(self.bundle, plan=plan)
            if not plan.is_file():  # a bundle without entrypoints plans nothing to hand back
                built = self._build()
                if cached is not None:
                    self._save_plan(cached)
                return built
            built = self._load_plan(plan, preflight=True)
            if cached is not None:
                self._save_plan(cached, planned=plan)
            return built

    def _cache_path(self, plan_cache: Path | None) -> Path | None:
        """rego-cpp's own binary plan for this bundle: keyed by bundle sha256, entrypoint, engine."""
        if plan_cache is None:
            return None
        from regopy import rego_version

        version = rego_version() if callable(rego_version) else str(rego_version)
        key = hashlib.sha256(f"{self.bundle.sha256}|{self.entrypoint}|{version}".encode()).hexdigest()
        return Path(plan_cache) / f"{key}.rbb"

    def _load_plan(self, path: Path, *, preflight: bool = False) -> Bundle:
        from regopy import BundleFormat

        what = "plan the preflight built" if preflight else "cached plan"
        where = self.bundle.source if preflight else str(path)
        hint = "" if preflight else "; delete it to rebuild"

        interpreter = self._new_interpreter()
        try:
            built = interpreter.load_bundle(str(path), BundleFormat.Binary)
        except Exception as exc:
            raise EngineLoadError(f"{where}: cannot load the {what}: {one_line(exc)}") from None
        if not built.ok():
            raise EngineLoadError(f"{where}: the {what} is not usable{hint}")
        self._local.interpreter = interpreter
        return built

    def _save_plan(self, path: Path, *, planned: Path | None = None) -> None:
        """Save this engine's plan (or copy ``planned``, the file it was loaded from) as ``path``."""
        from regopy import BundleFormat

        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
            if planned is not None:
                shutil.copyfile(planned, temporary)
            else:
                self._interpreter().save_bundle(str(temporary), self._built, BundleFormat.Binary)
            temporary.replace(path)
            plancache.bind(path, self.bundle.sha256, self.entrypoint)
        except Exception as exc:  # a cache that cannot be written only costs the next start time
            _log.warning("plan_cache_not_written", path=str(path), error=one_line(exc))

    def _new_interpreter(self) -> Interpreter:
        from regopy import Interpreter

        interpreter = Interpreter()
        # Undefined builtins (net.*, http.send...) become errors, not a silent undefined that a
        # `not` could flip into an allow (docs/engine-findings.md hazard 5).
        interpreter.strict_built_in_errors = True
        return interpreter

    def _build(self) -> Bundle:
        interpreter = self._new_interpreter()
        try:
            # UTF-8, never \\u escapes: regopy keeps escapes raw inside strings (engine-findings 2).
            interpreter.add_data_json(canonical_json(self.bundle.data).decode("utf-8"))
            for name, source in sorted(self.bundle.modules.items()):
                interpreter.add_module(name, source)
            built = interpreter.build(None, [self.entrypoint])
        except Exception as exc:  # regopy raises RegoError, ValueError...: all mean "cannot load"
            raise EngineLoadError(f"{self.bundle.source}: regopy cannot load the bundle: {one_line(exc)}") from None
        if not built.ok():
            raise EngineLoadError(
                f"{self.bundle.source}: regopy cannot plan {self.entrypoint}: {one_line(built.node())}"
            )
        self._local.interpreter = interpreter
        return built

    def _interpreter(self) -> Interpreter:
        interpreter = getattr(self._local, "interpreter", None)
        if interpreter is None:
            interpreter = self._local.interpreter = self._new_interpreter()
        return interpreter

    def evaluate(self, input_doc: JsonObject) -> EngineResult:
        """The entrypoint's value for ``input_doc``; never raises for anything the engine does."""
        try:
            interpreter = self._interpreter()
        except Exception as exc:
            return EngineResult(None, f"evaluation raised {type(exc).__name__}: {one_line(exc)}")
        return query_entrypoint(interpreter, self._built, self.entrypoint, input_doc)

    def close(self) -> None:
        """Nothing to release: the interpreters go with the engine."""


def check_manifest(bundle: LoadedBundle, entrypoint: str) -> None:
    """Refuse a bundle the gate must not decide with (raises :class:`EngineLoadError`)."""
    source = bundle.source
    metadata = bundle.manifest.get("metadata", {}).get("kcp_opa")
    if not isinstance(metadata, Mapping):
        raise EngineLoadError(f"{source}: .manifest has no kcp_opa metadata; compile it with `kcp-opa compile`")
    if entrypoint not in metadata.get("entrypoints", []):
        raise EngineLoadError(
            f"{source}: {entrypoint} is not an entrypoint of this bundle "
            f"(it declares {', '.join(metadata.get('entrypoints', [])) or 'none'})"
        )
    if not bundle.revision:
        raise EngineLoadError(f"{source}: .manifest has no revision; decisions could not name what decided")
    shadowed = shadowed_packages(bundle.modules, bundle.data)
    if shadowed:
        raise EngineLoadError(
            f"{source}: data at data.{shadowed[0]} would shadow the policy there "
            "(regopy silently prefers data; docs/engine-findings.md hazard 7); keep data and policy roots apart"
        )
    calls = forbidden_builtin_calls(bundle.modules)
    if calls:
        raise EngineLoadError(f"{source}: policy calls a builtin that breaks replay or leaks secrets: {calls[0]}")


def preflight_in_child(bundle: LoadedBundle, *, plan: Path | None = None) -> None:
    """Plan the bundle in a child process first: a plan that aborts rego-cpp fails here.

    The child plans the data and modules this process holds (not the file again, which could
    have changed since); with ``plan`` it saves what it built there for this process to load.
    """
    from kcp_opa.compile.enginecheck import plan_in_child
    from kcp_opa.core.errors import CompileError

    try:
        plan_in_child(bundle, strict=True, plan=plan)
    except CompileError as exc:
        raise EngineLoadError(str(exc)) from None


def query_entrypoint(interpreter: Interpreter, built: Bundle, entrypoint: str, input_doc: JsonObject) -> EngineResult:
    """Evaluate a built entrypoint over ``input_doc``, strings byte for byte in and out.

    Never through ``regopy.Output``: it ``json.loads`` rego-cpp's output text, where strings are
    not escaped (engine-findings item 23; hazards 1-3). The node tree is read value by value.
    """
    from regopy import rego_shared as native

    try:
        interpreter.set_input(rego_input(input_doc))
        output = native.rego_bundle_query_entrypoint(interpreter._impl, built._impl, entrypoint)
    except Exception as exc:
        return EngineResult(None, f"evaluation raised {type(exc).__name__}: {one_line(exc)}")
    try:
        if not native.rego_output_ok(output):
            return EngineResult(None, f"evaluation failed: {one_line(_output_text(output))}")
        results = read_results(native.rego_output_node(output))
    except Exception as exc:
        return EngineResult(None, f"reading the result raised {type(exc).__name__}: {one_line(exc)}")
    finally:
        native.rego_free_output(output)
    return _single_object(results, entrypoint)


def _output_text(output: object) -> str:
    from regopy import rego_shared as native

    try:
        return str(native.rego_output_string(output))
    except Exception as exc:  # error text that is not UTF-8 still becomes one line
        return f"(unreadable error text: {type(exc).__name__})"


def _single_object(results: list[list[object]], entrypoint: str) -> EngineResult:
    """The one object an entrypoint must produce, from the read ``Results`` node."""
    expressions = results[0] if results else None
    if not expressions:
        return EngineResult(None, f"{entrypoint} is undefined for this input")
    value = expressions[0]
    if len(results) != 1 or len(expressions) != 1 or not isinstance(value, dict):
        return EngineResult(None, f"{entrypoint} did not produce exactly one object")
    return EngineResult(value)


def one_line(value: object, limit: int = 300) -> str:
    """``value`` as one line of at most ``limit`` characters, for an error message."""
    text = " ".join(str(value).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."
