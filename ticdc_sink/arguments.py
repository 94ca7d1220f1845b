"""Argument types of the command line: each turns one argument's text into its value, or says
in one line (argparse's) why it is not one."""

from __future__ import annotations

import argparse
import re

# A Redis stream id as `deadletters list` shows it: milliseconds, optionally "-" and a sequence.
_STREAM_ID = re.compile(r"\d+(-\d+)?")
# A TSO (a commit ts) is an unsigned 64-bit number.
_TSO_LIMIT = 1 << 64


def _number(text: str, kind: type[int] | type[float], what: str) -> int | float:
    """``text`` as a ``kind``, or the argument error saying it is not ``what``."""
    try:
        return kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not {what}") from None


def positive(text: str) -> int:
    number = int(_number(text, int, "a positive number"))
    if number <= 0:
        raise argparse.ArgumentTypeError(f"{text} is not a positive number")
    return number


def share(text: str) -> float:
    value = _number(text, float, "a share between 0 and 1")
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"{text} is not a share between 0 and 1")
    return value


def tso(text: str) -> int:
    number = int(_number(text, int, "a commit ts"))
    if not 0 < number < _TSO_LIMIT:
        raise argparse.ArgumentTypeError(f"{text} is not a commit ts (a TSO: 1 to 2^64-1)")
    return number


def stream_id(text: str) -> str:
    if not _STREAM_ID.fullmatch(text):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a dead letter's id (digits, a dash, digits: see list)"
        )
    return text
