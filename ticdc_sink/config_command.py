"""`ticdc-sink config describe`: every setting, its variable, its value here and what it means."""

from __future__ import annotations

import orjson

from config.settings import GROUPS, SETTINGS, Settings

# The heading of the settings outside any group.
PIPELINE_GROUP = "pipeline"


def described(settings: Settings) -> list[dict[str, str]]:
    """One entry per setting, in the order of the groups: its variable, group, TOML key, value
    (secrets masked) and description."""
    shown = settings.describe()
    return [
        {
            "variable": doc.variable,
            "group": doc.group or PIPELINE_GROUP,
            "key": doc.path[-1],
            "value": shown[doc.variable],
            "description": doc.description,
        }
        for doc in SETTINGS
    ]


def group_title(group: str) -> str:
    """A group's heading: its name and its docstring's first line."""
    model = GROUPS.get(group)
    if model is None:
        return f"{group}: top-level keys"
    return f"[{group}] {(model.__doc__ or '').strip().splitlines()[0]}"


def run_describe(settings: Settings, as_json: bool = False) -> int:
    """Print every setting (``--json``: one JSON document)."""
    entries = described(settings)
    if as_json:
        print(orjson.dumps(entries, option=orjson.OPT_INDENT_2).decode())
        return 0
    group = None
    for entry in entries:
        if entry["group"] != group:
            group = entry["group"]
            print(("\n" if group != PIPELINE_GROUP else "") + group_title(group))
        print(f"  {entry['variable']}={entry['value']}")
        print(f"      {entry['description']}")
    return 0
