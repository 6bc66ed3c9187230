"""User-facing errors.

Every error a user can cause (bad file, bad field, bad placement) is a
`TrinityError` that renders as one line naming where the problem is:
``<source>: <field>: <message>``. The CLI prints that line and exits non-zero;
library callers can catch the class.
"""

from __future__ import annotations

import sys
from typing import Any, Callable


def short_repr(value: Any, limit: int = 60) -> str:
    """``repr(value)``, cut so that a message quoting a huge bad value stays short."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


class TrinityError(Exception):
    """Base class of all errors caused by user input."""

    def __init__(self, message: str, *, source: str | None = None, field: str | None = None):
        self.message = message
        self.source = source
        self.field = field
        super().__init__(str(self))

    def __str__(self) -> str:
        parts = [p for p in (self.source, self.field) if p]
        return ": ".join(parts + [self.message])

    def at(self, source: str) -> "TrinityError":
        """Return the same error attributed to ``source`` (a file name) if it has none."""
        if self.source is None:
            self.source = source
            self.args = (str(self),)
        return self


class GraphError(TrinityError):
    """An OpGraph that is malformed: cycle, unknown op, bad cost, duplicate name."""


class FormatError(TrinityError):
    """A file that cannot be read: truncated, wrong format or version."""


class ClusterError(TrinityError):
    """A cluster description that is inconsistent."""


class PlacementError(TrinityError):
    """A placement that cannot run, or a placer that cannot produce one."""


def run_main(main: Callable[[], Any]) -> None:
    """Run a command-line ``main``: a `TrinityError` (bad input) is one line on stderr and exit status 2."""
    try:
        main()
    except TrinityError as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
