"""What the file modules share: path arguments and one-line error details."""

from __future__ import annotations

import os
from typing import Union

PathLike = Union[str, os.PathLike]


def first_line(exc: BaseException) -> str:
    """The first line of ``exc``'s message (torch's and numpy's run over several)."""
    text = str(exc).strip().splitlines()
    return text[0] if text else "no message"
