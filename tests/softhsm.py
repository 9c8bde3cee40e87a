"""A throwaway SoftHSM2 token for tests: its own config and token directory in a temp dir.

``softhsm2-util`` asks for the PINs on a terminal, never in argv here: the token is initialised
through a pseudo-terminal, and the PIN reaches kcp-opa only through ``$KCP_OPA_PKCS11_PIN``.
SoftHSM reads ``SOFTHSM2_CONF`` when the module is first initialised in a process, so one token
serves a whole test session; subprocesses get the same environment.
"""

from __future__ import annotations

import os
import pty
import secrets
import select
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from kcp_opa.core.pkcs11 import KNOWN_MODULES

LABEL = "kcp-test"


@dataclass(frozen=True)
class Token:
    root: Path
    conf: Path
    label: str
    pin: str
    module: str

    def env(self) -> dict[str, str]:
        return {"SOFTHSM2_CONF": str(self.conf), "KCP_OPA_PKCS11_PIN": self.pin, "KCP_OPA_PKCS11_MODULE": self.module}

    def uri(self, label: str) -> str:
        return f"pkcs11:token={self.label};object={label}"


def available() -> str | None:
    """Why SoftHSM2 cannot run here, or None (``make sysdeps-softhsm`` installs it)."""
    if shutil.which("softhsm2-util") is None:
        return "softhsm2-util is not installed (make sysdeps-softhsm)"
    if not any(Path(module).is_file() for module in KNOWN_MODULES):
        return "libsofthsm2.so is not installed (make sysdeps-softhsm)"
    return None


def _answer_prompts(argv: list[str], answers: list[str], env: dict[str, str]) -> tuple[int, str]:
    """Run ``argv`` on a pseudo-terminal, typing one answer per prompt (the PINs stay off argv)."""
    master, slave = pty.openpty()
    proc = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave, env=env, start_new_session=True)
    os.close(slave)
    output, pending, deadline = b"", [f"{a}\n".encode() for a in answers], time.monotonic() + 30
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.2)
            if not ready:
                if proc.poll() is not None:
                    break
                continue
            try:
                chunk = os.read(master, 4096)
            except OSError:  # the child closed the terminal
                break
            output += chunk
            if chunk.rstrip().endswith(b":") and pending:
                os.write(master, pending.pop(0))
    finally:
        os.close(master)
    return proc.wait(timeout=30), output.decode("utf-8", "replace")


def make_token(root: Path, label: str = LABEL) -> Token:
    root.mkdir(parents=True, exist_ok=True)
    (root / "tokens").mkdir(exist_ok=True)
    conf = root / "softhsm2.conf"
    conf.write_text(f"directories.tokendir = {root / 'tokens'}\nobjectstore.backend = file\nlog.level = ERROR\n")
    pin, so_pin = secrets.token_hex(8), secrets.token_hex(8)
    env = {**os.environ, "SOFTHSM2_CONF": str(conf)}
    code, output = _answer_prompts(
        ["softhsm2-util", "--init-token", "--free", "--label", label], [so_pin, so_pin, pin, pin], env
    )
    if code != 0 or "has been initialized" not in output:
        raise RuntimeError(f"softhsm2-util --init-token failed ({code}): {output}")
    module = next(module for module in KNOWN_MODULES if Path(module).is_file())
    return Token(root, conf, label, pin, module)
