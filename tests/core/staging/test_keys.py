"""Key names: one hash tag per pipeline, distinct names, partitions named by topic and number."""

from __future__ import annotations

import re

from core.staging import Keys, TopicPartition

TP = TopicPartition("orders", 3)


def _names(keys: Keys) -> list[str]:
    fixed = [
        getattr(keys, name)
        for name in dir(Keys)
        if isinstance(getattr(Keys, name), property) and name != "pattern"
    ]
    return [*fixed, keys.rows(TP), keys.resolved(TP)]


def test_every_key_of_a_pipeline_shares_its_hash_tag_and_matches_its_pattern() -> None:
    keys = Keys("shop")
    names = _names(keys)
    assert len(names) == len(set(names)) == 20
    pattern = re.escape(keys.pattern).replace(r"\*", ".*")
    for name in names:
        # Redis Cluster hashes only what is inside the first {...}: one slot per pipeline.
        assert re.fullmatch(r"[^{]*\{shop\}.*", name), name
        assert re.fullmatch(pattern, name), name


def test_two_pipelines_share_no_key() -> None:
    assert not set(_names(Keys("a"))) & set(_names(Keys("b")))
    assert Keys("a").rows(TP).endswith(":rows:orders:3")
