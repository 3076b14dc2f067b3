"""How wide the commands' tables may be."""

from __future__ import annotations

import shutil
from typing import Final, TextIO

MIN_WIDTH: Final = 80


def terminal_width(stream: TextIO, fallback: int) -> int:
    """The terminal's width (at least 80 columns) when ``stream`` is one; else ``fallback``."""
    try:
        if stream.isatty():
            return max(MIN_WIDTH, shutil.get_terminal_size((fallback, 24)).columns)
    except (AttributeError, ValueError, OSError):
        pass
    return fallback
