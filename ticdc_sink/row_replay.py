"""`ticdc-sink deadletters replay ID` of a row letter: the row the downstream refused, written
to it in one transaction once the cause is fixed.

The sink records no per-key history, and its checkpoint says only which commit ts is applied,
not whether a change of this key came after the refused one. So the letter carries what the
downstream held for the key when it refused the row (the batch was applied without it and had
no other change of that key), and a replay writes the row only while the downstream still holds
exactly that, read under a row lock in the writing transaction: any later change of the key
that was applied since makes the rows differ, and the replay is refused.
"""

from __future__ import annotations

from typing import Any

import orjson

from config.errors import ReplayRefusedError
from config.settings import Settings
from core.staging import RowLetter
from spark_sink.db.connection import connect
from spark_sink.db.dialect import quote
from spark_sink.refused import downstream_image, from_json


def write_statement(target: str, row: dict[str, Any], key: dict[str, Any], exists: bool) -> str:
    """The SQL writing ``row`` into ``target``: an INSERT, or an UPDATE of the key's row."""
    if not exists:
        names = ", ".join(quote(name) for name in row)
        return f"INSERT INTO {target} ({names}) VALUES ({', '.join(['%s'] * len(row))})"
    assignments = ", ".join(f"{quote(name)} = %s" for name in row)
    where = " AND ".join(f"{quote(name)} <=> %s" for name in key)
    return f"UPDATE {target} SET {assignments} WHERE {where} LIMIT 1"


def replay_row(settings: Settings, letter: RowLetter) -> str:
    """Write ``letter``'s row downstream, or refuse; returns what was done, to print."""
    if not letter.target or letter.before is None:
        raise ReplayRefusedError(
            f"dead letter {letter.id}: no record of what the downstream held for this key of "
            f"{letter.table} when it refused the row (a table without a key): write it by hand"
        )
    key: dict[str, Any] = orjson.loads(letter.key)
    row: dict[str, Any] = orjson.loads(letter.row)
    conn = connect(settings)
    try:
        with conn.cursor() as cursor:
            now = downstream_image(cursor, letter.target, key, lock=True)
            if now != letter.before:
                raise ReplayRefusedError(
                    f"dead letter {letter.id}: the downstream row of {letter.table} key "
                    f"{letter.key} changed since the row was refused (a later change of that "
                    "key was applied, or the row was written already): writing it would undo "
                    "that; export it and decide by hand"
                )
            exists = now != "null"
            values = [from_json(value) for value in row.values()]
            if exists:
                values += [from_json(value) for value in key.values()]
            cursor.execute(write_statement(letter.target, row, key, exists), values)
        conn.commit()
    finally:
        conn.rollback()  # nothing when committed; a refusal or an error leaves nothing
        conn.close()
    return f"wrote the row of {letter.table} key {letter.key} (commit ts {letter.commit_ts})"
