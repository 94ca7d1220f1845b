"""The staging Lua scripts, shipped as package files (``core/staging/*.lua``)."""

from __future__ import annotations

from importlib.resources import files


def _load(name: str) -> str:
    """The script ``name`` without its comment lines: EVAL sends the text with every batch."""
    text = (files(__package__) / name).read_text(encoding="utf-8")
    return "".join(line for line in text.splitlines(True) if not line.startswith("--"))


# Records a partition's messages with their offsets (run in the MULTI with their rows' ZADD).
STAGE = _load("stage.lua")
# Moves a quiet partition's watermark as a resolved event at its staged offset would.
RESOLVE_IDLE = _load("resolve_idle.lua")
# Lowers a partition's held commit ts to a newly held message's.
HOLD_TS = _load("hold_ts.lua")
# Deletes one page of a partition's rows below a bound and takes them off the staged totals.
TRIM = _load("trim.lua")
# Adds a message's row members outside the stage script, counting only those new.
STAGE_MEMBERS = _load("stage_members.lua")
# Counts the rows of one page of a partition's row members.
COUNT_ROWS = _load("count_rows.lua")
# Records the commit ts at which a topic's table went away, forward only.
RETIRE = _load("retire.lua")
