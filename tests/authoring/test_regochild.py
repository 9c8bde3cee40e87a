"""The regopy child that runs Rego test files: an abort and an overrun are told apart by what
the reader saw, not by whether the dead child was already reaped (real child processes)."""

from __future__ import annotations

from conftest import REPO

from kcp_opa.authoring.regochild import regopy_files

ABORTING = REPO / "tests" / "fixtures" / "rego" / "aborting"
PLAIN = """package plain_test

import rego.v1

test_true if true
"""


def _policy() -> dict[str, str]:
    return {"crash.rego": (ABORTING / "crash.rego").read_text()}


def test_a_file_whose_child_aborts_is_an_abort_and_the_next_file_still_runs() -> None:
    """On a loaded box the aborted child still looked alive when its stdout closed: every file
    from there on was reported as a 300 s timeout, returned within a second."""
    files = [
        ("crash_test.rego", (ABORTING / "crash_test.rego").read_text(), ["data.crash_test.test_aborts_regopy"]),
        ("plain_test.rego", PLAIN, ["data.plain_test.test_true"]),
    ]
    for _ in range(5):  # the race needed load to show; five tries make it show without it too
        done = regopy_files(_policy(), files)
        assert done["crash_test.rego"] is None, done
        plain = done["plain_test.rego"]
        assert plain is not None and "__timeout__" not in plain, done


def test_a_file_past_its_limit_is_an_overrun() -> None:
    files = [("plain_test.rego", PLAIN, ["data.plain_test.test_true"])]
    done = regopy_files(_policy(), files, timeout_s=0.001)
    assert done["plain_test.rego"] == {"__timeout__": 0.001}
