"""The version of this package that wrote an output (summaries, metrics.json, run logs, the Space's requirements)."""

from __future__ import annotations


def package_version() -> str:
    """This package's installed version, as summaries, metrics.json and the Space's requirements record it."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("orca-judge")
    except PackageNotFoundError:
        return "unknown (not installed)"
