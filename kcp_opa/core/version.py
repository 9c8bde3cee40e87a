"""The package version, in one place below every stage (the compiler stamps it into bundles)."""

from __future__ import annotations

__version__ = "0.1.0"
