"""DDL text as tokens, and edits of it by token span.

The DDL a TiCDC event carries is the statement as the user wrote it upstream. Changes to it
(TiDB-only clauses taken out, names routed) are made on the tokens of sqlglot's MySQL tokenizer,
each edit replacing an exact span of the original text: everything else (comments, spacing,
clauses no parser here knows) reaches the downstream as it was written.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from sqlglot.dialects.mysql import MySQL
from sqlglot.errors import SqlglotError
from sqlglot.tokenizer_core import Token, TokenType

from config.errors import DDLError
from core.sql import quote

_DIALECT = MySQL()
# Leading keywords of a statement about a whole database: it runs without `USE`.
_DATABASE_WORDS = frozenset({"DATABASE", "SCHEMA"})
# Words of a statement that may change which tables a foreign key references: one made, or a
# table renamed under it.
_FOREIGN_KEY_WORDS = frozenset({"REFERENCES", "FOREIGN", "RENAME"})


@dataclass(frozen=True)
class Edit:
    """Replace ``text[start:end]`` with ``replacement``."""

    start: int
    end: int
    replacement: str = ""


def tokens(query: str) -> list[Token]:
    """The statement's tokens (comments are not tokens: sqlglot hangs them on their neighbours)."""
    try:
        toks = list(_DIALECT.tokenize(query))
        # A command sqlglot does not parse (RENAME) comes back as one string of its rest.
        if len(toks) == 2 and toks[1].token_type is TokenType.STRING:
            rest = toks[0].end + 1
            if query[rest:].strip()[:1] not in "'\"":
                return [toks[0], *(_shifted(t, rest) for t in _DIALECT.tokenize(query[rest:]))]
    except SqlglotError as error:
        raise DDLError(f"cannot read the DDL's tokens ({error}): {query}") from None
    return toks


def _shifted(token: Token, offset: int) -> Token:
    return Token(
        token.token_type,
        token.text,
        token.line,
        token.col,
        token.start + offset,
        token.end + offset,
        token.comments,
    )


def word(token: Token) -> str:
    """A bare word's upper-case text; empty for quoted names, strings and symbols (a backquoted
    `TTL` is a name, never the keyword)."""
    if token.token_type in (TokenType.IDENTIFIER, TokenType.STRING) or not token.text:
        return ""
    return token.text.upper() if token.text[0].isalpha() or token.text[0] == "_" else ""


def span(first: Token, last: Token) -> tuple[int, int]:
    """The text span from ``first`` to ``last`` inclusive."""
    return first.start, last.end + 1


def apply_edits(query: str, edits: Iterable[Edit]) -> str:
    """``query`` with every edit made (edits must not overlap)."""
    out, at = [], 0
    for edit in sorted(edits, key=lambda e: e.start):
        if edit.start < at:
            raise ValueError(f"overlapping DDL edits at {edit.start}")
        out.append(query[at : edit.start])
        out.append(edit.replacement)
        at = edit.end
    out.append(query[at:])
    return "".join(out)


def leading_words(toks: Sequence[Token], count: int) -> tuple[str, ...]:
    """The statement's first ``count`` words, upper-case ('' for a non-word)."""
    return tuple(word(t) for t in toks[:count])


def is_database_ddl(query: str) -> bool:
    """``CREATE``/``DROP``/``ALTER DATABASE|SCHEMA``: a statement that names its database
    itself and must not depend on ``USE`` (the database may not exist yet, or any more)."""
    first = leading_words(tokens(query), 2)
    return (
        len(first) == 2
        and first[0] in {"CREATE", "DROP", "ALTER"}
        and first[1] in (_DATABASE_WORDS)
    )


def may_change_foreign_keys(query: str) -> bool:
    """Whether the statement may make a foreign key or rename a table (which a foreign key may
    reference): its words name one (a quoted name never counts); an unreadable one may."""
    try:
        return any(word(token) in _FOREIGN_KEY_WORDS for token in tokens(query))
    except DDLError:
        return True


def statements(query: str) -> int:
    """How many statements ``query`` holds: runs of tokens between ``;`` (one inside a string,
    a name or a comment is no token; an empty statement counts none)."""
    count, pending = 0, False
    for token in tokens(query):
        if token.token_type is TokenType.SEMICOLON:
            count, pending = count + pending, False
        else:
            pending = True
    return count + pending


def requoted_drop(query: str, schema: str | None, table: str | None) -> str:
    """``query``, or, when it is TiCDC's own rebuilt ``DROP TABLE`` / ``DROP VIEW`` with the
    names put between backticks unescaped (pingcap/tiflow ``cdc/model/sink.go``
    ``DDLEvent.FromJobWithArgs``: ``fmt.Sprintf("DROP TABLE `%s`.`%s`", ...)``), the same
    statement with the event's names quoted: a name holding a backtick is not SQL otherwise."""
    if not schema or not table or "`" not in schema + table:
        return query
    for kind in ("TABLE", "VIEW"):
        if query == f"DROP {kind} `{schema}`.`{table}`":
            return f"DROP {kind} {quote(schema)}.{quote(table)}"
    return query
