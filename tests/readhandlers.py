"""The read handler the service recheck tests' server runs; each run is appended to the file
``KCP_OPA_TEST_HANDLER_LOG`` names, so the file proves whether the side effect ran."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any


def read(action: Mapping[str, Any]) -> Any:
    with open(os.environ["KCP_OPA_TEST_HANDLER_LOG"], "a", encoding="utf-8") as log:
        log.write(f"{action['idempotency_key']}\n")
    return {"read": action["target"]["reference"]}
