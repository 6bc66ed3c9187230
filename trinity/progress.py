"""Progress reports that also work in batch logs.

`progress` gives a tqdm bar when stderr is a terminal. Otherwise (a batch
job, ``2> log``) a redrawn bar would fill the log with carriage returns, so it
gives `PlainProgress` instead: one plain line every ``interval_s`` seconds and
a last one at close, e.g.::

    search: 120/1000 (12%), 3.1 it/s, 4m45s left, best_ms=461.2
"""

from __future__ import annotations

import sys
import time
from typing import Any, Callable, Iterable, TextIO


def progress(iterable: Iterable | None = None, *, total: int | None = None, desc: str = "", unit: str = "it",
             initial: int = 0, interval_s: float = 30.0, disable: bool = False,
             clock: Callable[[], float] = time.monotonic, file: TextIO | None = None, **tqdm_kwargs):
    """A tqdm bar on a terminal, else a `PlainProgress`; either iterates ``iterable`` if given.
    ``tqdm_kwargs`` (``leave``, ``dynamic_ncols``) only matter to the bar."""
    file = file or sys.stderr
    if _is_terminal(file):
        from tqdm import tqdm

        return tqdm(iterable, total=total, desc=desc, unit=unit, initial=initial, disable=disable, file=file,
                    **tqdm_kwargs)
    return PlainProgress(iterable, total=total, desc=desc, unit=unit, initial=initial, interval_s=interval_s,
                         disable=disable, clock=clock, file=file)


def _is_terminal(file) -> bool:
    try:
        return file.isatty()
    except (AttributeError, ValueError):  # no isatty, or a closed file
        return False


def format_duration(seconds: float) -> str:
    """``45s``, ``4m05s``, ``2h03m``."""
    s = int(round(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


def _format_value(v: Any) -> str:
    return f"{v:.4g}" if isinstance(v, float) else str(v)


class PlainProgress:
    """The tqdm calls Trinity uses (``update``, ``set_postfix``, ``close``, iteration, ``with``),
    reported as a plain line at most every ``interval_s`` seconds, and one at close."""

    def __init__(self, iterable: Iterable | None = None, *, total: int | None = None, desc: str = "",
                 unit: str = "it", initial: int = 0, interval_s: float = 30.0, disable: bool = False,
                 clock: Callable[[], float] = time.monotonic, file: TextIO | None = None):
        if total is None and hasattr(iterable, "__len__"):
            total = len(iterable)
        self.iterable, self.total, self.desc, self.unit = iterable, total, desc, unit
        self.interval_s, self.disable, self.clock = interval_s, disable, clock
        self.file = file or sys.stderr
        self.n = self.initial = initial  # a resumed run starts part-way; its rate counts from here
        self.postfix: dict[str, Any] = {}
        self.start = clock()
        self._next_report = self.start + interval_s
        self._closed = False

    def __iter__(self):
        try:
            for item in self.iterable:
                yield item
                self.update(1)
        finally:
            self.close()

    def __enter__(self) -> "PlainProgress":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def update(self, n: int = 1) -> None:
        self.n += n
        now = self.clock()
        if now >= self._next_report:
            self._next_report = now + self.interval_s
            self._write(self.line(now))

    def set_postfix(self, ordered_dict=None, refresh: bool = True, **kwargs) -> None:
        """Values shown at the end of each line (tqdm's signature; ``refresh`` is ignored)."""
        self.postfix = {**(ordered_dict or {}), **kwargs}

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._write(self.line(self.clock(), final=True))

    def line(self, now: float, final: bool = False) -> str:
        """``desc: n/total (p%), rate, time left (or taken), postfix``."""
        elapsed = now - self.start
        parts = [f"{self.n}/{self.total} ({100 * self.n / self.total:.0f}%)" if self.total
                 else f"{self.n} {self.unit}"]
        rate = (self.n - self.initial) / elapsed if elapsed > 0 else 0.0
        if rate >= 0.1:
            parts.append(f"{rate:.1f} {self.unit}/s")
        elif rate > 0:
            parts.append(f"{1 / rate:.1f} s/{self.unit}")
        if final:
            parts.append(f"took {format_duration(elapsed)}")
        elif rate > 0 and self.total and self.n < self.total:
            parts.append(f"{format_duration((self.total - self.n) / rate)} left")
        parts += [f"{k}={_format_value(v)}" for k, v in self.postfix.items()]
        text = ", ".join(parts)
        return f"{self.desc}: {text}" if self.desc else text

    def _write(self, text: str) -> None:
        if not self.disable:
            print(text, file=self.file, flush=True)
