"""The structural fuzzer: messages generated from each protocol's grammar
(``streams/codecs/<protocol>_grammar.py``) by hypothesis strategies, their STRUCTURE mutated
(``mutate.py``: a member dropped, emptied, retyped or duplicated at any depth, fields TiCDC never
writes together combined, unknown fields added), each judged three ways (``judge.py``): the
grammar says valid or which rule it breaks, the Python codec accepts exactly the valid ones and
names that rule for the rest, the native decoder hands back every invalid one and decodes a
valid one as Python does. Byte mutations of real messages (tests/streams/codecs/fuzz.py) almost
never give well-formed messages of the wrong shape: this does nothing else.

Each protocol's module (``open.py``, ...) provides a :class:`~.judge.Subject`: its ``messages()``
strategy, ``oracle(message)`` (the rule broken, None when valid), ``encode(message)`` (Kafka key
and value) and the decoders to compare. ``make fuzz`` runs ``python -m
tests.streams.codecs.structure`` (every protocol; ``--protocol P`` for one).
"""

from __future__ import annotations

import importlib

from tests.streams.codecs.structure.judge import Subject

# The protocols with a module here, by the name --protocol takes.
PROTOCOLS = ("open", "craft", "simple", "simple-avro", "canal", "debezium", "avro")
# The grammar module of each protocol whose name is not its own.
GRAMMARS = {"simple-avro": "simple"}


def grammar(protocol: str) -> str:
    """The module of ``protocol``'s grammar (``streams/codecs/<protocol>_grammar.py``)."""
    return f"streams.codecs.{GRAMMARS.get(protocol, protocol)}_grammar"


def subject(protocol: str) -> Subject:
    """The Subject of ``protocol``'s module."""
    module = protocol.replace("-", "_")
    found: Subject = importlib.import_module(f"{__name__}.{module}").SUBJECT
    return found
