"""Progress bars for long runs: shown on a terminal, silent with ``--quiet`` or when stderr is not a TTY."""

from __future__ import annotations

import sys
from contextlib import contextmanager

from tqdm import tqdm


class _Null:
    def update(self, n: int = 1) -> None:
        pass

    def set_postfix_str(self, s: str) -> None:
        pass


@contextmanager
def progress_bar(total: int, desc: str, quiet: bool = False):
    """A tqdm bar on stderr when it is a terminal and not ``quiet``; otherwise a no-op object."""
    if quiet or not sys.stderr.isatty():
        yield _Null()
        return
    # no monitor thread (it only tunes how often a slow bar redraws): a process with one thread may
    # fork helpers while the bar runs (horizon.rolling.BoundBeside)
    tqdm.monitor_interval = 0
    bar = tqdm(total=total, desc=desc, file=sys.stderr, leave=False, dynamic_ncols=True)
    try:
        yield bar
    finally:
        bar.close()
