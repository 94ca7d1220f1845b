"""Routes applied inside DDL text: every database and table name a statement names is rewritten.

The statement is parsed with sqlglot (MySQL dialect) to find the names it holds, table by table
(``CREATE TABLE ... LIKE``, ``REFERENCES``, ``DROP TABLE a, b``, views); each name's exact span of
the original text is then replaced, so nothing else in the statement changes. What sqlglot reads
only as an opaque command is handled on its tokens where the shape is fixed: ``RENAME TABLE a TO b,
...``, and ``ALTER TABLE|DATABASE name ...`` (whose only name is its subject, unless it renames or
references another table). Anything else with a route to apply is refused, never guessed.

The same reading says which tables a statement run downstream may have changed
(:func:`named_tables`), so the sink reads again the layouts of those tables only.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

import sqlglot
from sqlglot import exp
from sqlglot.errors import SqlglotError
from sqlglot.tokenizer_core import Token, TokenType

from config.errors import DDLError
from spark_sink.db.dialect import quote
from spark_sink.ddl.text import Edit, apply_edits, leading_words, tokens, word
from spark_sink.routing import Router

# sqlglot logs a warning for every statement it reads only as a command; those are handled here.
logging.getLogger("sqlglot").setLevel(logging.ERROR)

# Drop kinds whose names are tables or databases (an index's or a key's name is not).
_DROPS_OF_NAMES = frozenset({"TABLE", "VIEW", "DATABASE", "SCHEMA"})
# Words that put a second table name into an ALTER TABLE that sqlglot could not parse.
_SECOND_NAME_WORDS = frozenset({"RENAME", "REFERENCES", "EXCHANGE"})


@dataclass(frozen=True)
class NameRef:
    """A name in the statement: ``schema`` is None for an unqualified table; ``start``/``end``
    span the whole written name (both parts, quotes included)."""

    schema: str | None
    name: str
    start: int
    end: int
    is_database: bool = False


def route_ddl(query: str, schema: str, router: Router, home: str | None) -> str:
    """``query`` (run upstream in ``schema``) with its names routed downstream, where it runs
    in database ``home`` (None: it names its database itself)."""
    if not router.routes:
        return query
    edits = [
        edit for ref in _names(query) if (edit := _rename(ref, schema, router, home)) is not None
    ]
    return apply_edits(query, edits)


def named_database(query: str) -> str | None:
    """The database a DDL names with its first qualified table (``CREATE TABLE db.t``), for an
    event that does not say which database it ran in; None when it names none."""
    try:
        refs = _names(query)
    except DDLError:
        return None
    return next((ref.schema for ref in refs if ref.schema is not None), None)


def named_tables(query: str, home: str | None) -> frozenset[tuple[str, str]] | None:
    """The tables ``query`` names, as (database, table) lowered (the downstream may compare
    names without case), an unqualified one in ``home``; None when any table may have changed:
    the statement names a database, or an unqualified table with no ``home``, or no table, or
    cannot be read."""
    try:
        refs = _names(query)
    except DDLError:
        return None
    named = set()
    for ref in refs:
        database = ref.schema if ref.schema is not None else home
        if ref.is_database or database is None:
            return None
        named.add((database.lower(), ref.name.lower()))
    return frozenset(named) or None


def _rename(ref: NameRef, schema: str, router: Router, home: str | None) -> Edit | None:
    if ref.is_database:
        target = router.route_schema(ref.name)
        return None if target == ref.name else Edit(ref.start, ref.end, quote(target))
    upstream_schema = ref.schema if ref.schema is not None else schema
    routed = router.route(upstream_schema, ref.name)
    if routed is None or (routed == (upstream_schema, ref.name) and ref.schema is not None):
        return None  # a skipped table keeps its name (its DDL is skipped as a whole)
    if ref.schema is None and routed == (home, ref.name):
        return None  # unqualified, and the routed database is where the DDL runs
    return Edit(ref.start, ref.end, f"{quote(routed[0])}.{quote(routed[1])}")


def _names(query: str) -> list[NameRef]:
    toks = tokens(query)
    if leading_words(toks, 2) == ("RENAME", "TABLE"):
        return _rename_table_names(query, toks)
    try:
        statement = sqlglot.parse_one(query, read="mysql")
    except SqlglotError:
        statement = None
    if statement is None or isinstance(statement, exp.Command):
        return _alter_subject(query, toks)
    return _parsed_names(query, statement)


def _parsed_names(query: str, statement: exp.Expr) -> list[NameRef]:
    kind = str(statement.args.get("kind") or "").upper()
    refs = []
    for table in statement.find_all(exp.Table):
        drop = table.parent
        if (
            isinstance(drop, exp.Drop)
            and table in (drop.args.get("tables") or ())
            and str(drop.args.get("kind") or "").upper() not in _DROPS_OF_NAMES
        ):
            continue  # the name of an index, key or constraint being dropped
        parts = [p for p in (table.args.get("db"), table.this) if isinstance(p, exp.Identifier)]
        if not parts or any("start" not in p.meta for p in parts):
            raise DDLError(f"cannot route the DDL: sqlglot gave no position for a name: {query}")
        start, end = parts[0].meta["start"], parts[-1].meta["end"] + 1
        if kind in {"DATABASE", "SCHEMA"} and isinstance(statement, exp.Create | exp.Drop):
            refs.append(NameRef(None, parts[-1].name, start, end, is_database=True))
        elif len(parts) == 2:
            refs.append(NameRef(parts[0].name, parts[1].name, start, end))
        else:
            refs.append(NameRef(None, parts[0].name, start, end))
    return refs


def _rename_table_names(query: str, toks: Sequence[Token]) -> list[NameRef]:
    """``RENAME TABLE a TO b [, c TO d ...]``: every name, read off the tokens."""
    refs, at = [], 2
    while at < len(toks):
        ref, at = _dotted_name(query, toks, at)
        refs.append(ref)
        if at < len(toks) and (word(toks[at]) == "TO" or toks[at].token_type is TokenType.COMMA):
            at += 1
        elif at < len(toks):
            raise DDLError(f"cannot route the DDL: unexpected {toks[at].text!r} in {query}")
    return refs


def _alter_subject(query: str, toks: Sequence[Token]) -> list[NameRef]:
    """``ALTER TABLE|DATABASE|SCHEMA name ...`` that sqlglot did not parse: its subject."""
    first = leading_words(toks, 2)
    if len(first) == 2 and first[0] == "ALTER":
        if first[1] in {"DATABASE", "SCHEMA"} and len(toks) > 2:
            name = toks[2]
            return [NameRef(None, name.text, name.start, name.end + 1, is_database=True)]
        if first[1] == "TABLE" and not any(word(t) in _SECOND_NAME_WORDS for t in toks):
            return [_dotted_name(query, toks, 2)[0]]
    raise DDLError(
        "cannot route the DDL: no parser here reads where its names are (route it by hand "
        f"with `ticdc-sink skip-ddl` and run it downstream yourself): {query}"
    )


def _dotted_name(query: str, toks: Sequence[Token], at: int) -> tuple[NameRef, int]:
    """The ``name`` or ``schema.name`` at token ``at``, and the index after it."""
    if at >= len(toks) or not _is_name(toks[at]):
        raise DDLError(f"cannot route the DDL: expected a table name in {query}")
    first = toks[at]
    if at + 2 < len(toks) and toks[at + 1].token_type is TokenType.DOT and _is_name(toks[at + 2]):
        second = toks[at + 2]
        return NameRef(first.text, second.text, first.start, second.end + 1), at + 3
    return NameRef(None, first.text, first.start, first.end + 1), at + 1


def _is_name(token: Token) -> bool:
    return token.token_type is TokenType.IDENTIFIER or bool(word(token))
