"""TiDB-only DDL syntax made safe for a MySQL or MariaDB downstream.

TiCDC's own MySQL sink parses each DDL with TiDB's parser and writes it back with TiDB's features
inside ``/*T![feature] ... */`` comments (and placement rules left out), which MySQL reads as
plain comments. Here the same clauses are taken out of the statement's tokens (see
:mod:`spark_sink.ddl.text`); ``/*T! ... */`` comments already in the text stay, as MySQL ignores
them. A statement that is only a TiDB feature (``ALTER TABLE t CACHE``, placement policies,
TiFlash replicas) has nothing to run downstream: :func:`mysql_safe` returns None for it.
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlglot.tokenizer_core import Token, TokenType

from spark_sink.ddl.text import Edit, apply_edits, leading_words, span, tokens, word

# Table options of one value: `SHARD_ROW_ID_BITS = 4`, `TTL_ENABLE = 'OFF'`.
_ONE_VALUE_OPTIONS = frozenset(
    {
        "SHARD_ROW_ID_BITS",
        "PRE_SPLIT_REGIONS",
        "AUTO_ID_CACHE",
        "AUTO_RANDOM_BASE",
        "TTL_ENABLE",
        "TTL_JOB_INTERVAL",
        "STATS_BUCKETS",
        "STATS_TOPN",
        "STATS_COL_CHOICE",
        "STATS_COL_LIST",
        "STATS_SAMPLE_RATE",
    }
)
# Statements that are a TiDB feature and nothing else, by their leading words.
_TIDB_ONLY_STATEMENTS = (
    ("CREATE", "PLACEMENT", "POLICY"),
    ("ALTER", "PLACEMENT", "POLICY"),
    ("DROP", "PLACEMENT", "POLICY"),
    ("CREATE", "RESOURCE", "GROUP"),
    ("ALTER", "RESOURCE", "GROUP"),
    ("DROP", "RESOURCE", "GROUP"),
    ("FLASHBACK",),
    ("RECOVER", "TABLE"),
)
# What may follow `ALTER TABLE name` and makes the whole statement TiDB's own.
_TIDB_ONLY_ALTERS = frozenset({"CACHE", "NOCACHE", "COMPACT", "SET", "REMOVE"})
# Words after which a word is a column's name, not a column option (`ADD COLUMN auto_random`).
_NAME_POSITION = frozenset({"ADD", "COLUMN", "MODIFY", "CHANGE", "AFTER", "DROP", "TO", "BY"})


def mysql_safe(query: str) -> str | None:
    """``query`` without TiDB-only syntax; None when nothing is left to run downstream."""
    toks = tokens(query)
    if not toks:
        return None
    if any(leading_words(toks, len(lead)) == lead for lead in _TIDB_ONLY_STATEMENTS):
        return None
    if _alter_subject_end(toks) is not None and _tidb_only_alter(toks):
        return None
    edits = _edits(toks)
    if not edits:
        return query
    safe = apply_edits(query, edits).strip()
    # `ALTER TABLE t SHARD_ROW_ID_BITS = 4` leaves `ALTER TABLE t`: nothing to do downstream.
    end = _alter_subject_end(tokens(safe))
    return None if end is not None and end == len(tokens(safe)) else safe


def _alter_subject_end(toks: Sequence[Token]) -> int | None:
    """For ``ALTER TABLE|DATABASE|SCHEMA name``: the index of the token after the name."""
    first = leading_words(toks, 2)
    if len(first) < 2 or first[0] != "ALTER" or first[1] not in {"TABLE", "DATABASE", "SCHEMA"}:
        return None
    at = 2
    if at < len(toks) and toks[at].token_type is not TokenType.DOT:
        at += 1
    while at + 1 < len(toks) and toks[at].token_type is TokenType.DOT:
        at += 2
    return at


def _tidb_only_alter(toks: Sequence[Token]) -> bool:
    at = _alter_subject_end(toks)
    if at is None or at >= len(toks):
        return False
    head = word(toks[at])
    if head == "SET":
        # `SET TIFLASH REPLICA n`; other SET forms are not TiDB's.
        return at + 1 < len(toks) and word(toks[at + 1]) == "TIFLASH"
    if head == "REMOVE":
        return at + 1 < len(toks) and word(toks[at + 1]) == "TTL"
    return head in _TIDB_ONLY_ALTERS and at + 1 == len(toks)


def _edits(toks: Sequence[Token]) -> list[Edit]:
    """The spans of TiDB-only clauses, each with a comma that joined it to its neighbours."""
    edits: list[Edit] = []
    at = 0
    while at < len(toks):
        end = _clause_end(toks, at)
        if end is None:
            at += 1
            continue
        first, last = at, end - 1
        # Take one comma along, so `ENGINE=InnoDB, SHARD_ROW_ID_BITS=4` stays a valid list.
        if (
            first > 0
            and toks[first - 1].token_type is TokenType.COMMA
            and _removable(edits, toks, first - 1)
        ):
            first -= 1
        elif (
            end < len(toks)
            and toks[end].token_type is TokenType.COMMA
            and _at_list_start(toks, first)
        ):
            last = end
            end += 1
        start, stop = span(toks[first], toks[last])
        edits.append(Edit(start, stop))
        at = end
    return edits


def _removable(edits: list[Edit], toks: Sequence[Token], index: int) -> bool:
    """Whether the comma at ``index`` is not already part of an edit."""
    return not any(e.start <= toks[index].start < e.end for e in edits)


def _at_list_start(toks: Sequence[Token], index: int) -> bool:
    """A clause with no comma before it: first in its list (after `ALTER TABLE name`)."""
    end = _alter_subject_end(toks)
    return end is not None and index == end


def _clause_end(toks: Sequence[Token], at: int) -> int | None:
    """If a TiDB-only clause starts at ``at``: the index just past it."""
    name = word(toks[at])
    following = toks[at + 1] if at + 1 < len(toks) else None
    before = toks[at - 1] if at > 0 else None
    if name == "AUTO_RANDOM" and _is_column_option(before):
        return _past_parentheses(toks, at + 1)
    if name in {"CLUSTERED", "NONCLUSTERED"} and before is not None:
        if before.token_type in (TokenType.R_PAREN, TokenType.PRIMARY_KEY) or word(before) == "KEY":
            return at + 1
        return None
    if name in _ONE_VALUE_OPTIONS and following is not None:
        return _past_value(toks, at + 1)
    if name == "PLACEMENT" and following is not None and word(following) == "POLICY":
        return _past_value(toks, at + 2, names=True)
    if name == "TTL" and following is not None and following.token_type is TokenType.EQ:
        # `TTL = col + INTERVAL n UNIT`: through the unit after INTERVAL.
        for index in range(at + 2, len(toks)):
            if toks[index].token_type is TokenType.INTERVAL:
                return min(index + 3, len(toks))
    return None


def _is_column_option(before: Token | None) -> bool:
    if before is None or before.token_type in (TokenType.COMMA, TokenType.L_PAREN):
        return False
    return word(before) not in _NAME_POSITION


def _past_parentheses(toks: Sequence[Token], at: int) -> int:
    """Past an optional ``( ... )`` group at ``at``."""
    if at >= len(toks) or toks[at].token_type is not TokenType.L_PAREN:
        return at
    depth = 0
    for index in range(at, len(toks)):
        if toks[index].token_type is TokenType.L_PAREN:
            depth += 1
        elif toks[index].token_type is TokenType.R_PAREN:
            depth -= 1
            if depth == 0:
                return index + 1
    return len(toks)


def _past_value(toks: Sequence[Token], at: int, names: bool = False) -> int | None:
    """Past ``[=] value`` at ``at``; None when no value follows (then it was a name). Without
    ``=`` the value must be a number or string, or with ``names`` also a name."""
    values = (TokenType.NUMBER, TokenType.STRING)
    if at < len(toks) and toks[at].token_type is TokenType.EQ:
        at += 1
    elif at < len(toks) and not (
        toks[at].token_type in values
        or (names and (word(toks[at]) or toks[at].token_type is TokenType.IDENTIFIER))
    ):
        return None
    return at + 1 if at < len(toks) else None
