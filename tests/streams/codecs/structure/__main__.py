"""``python -m tests.streams.codecs.structure [--protocol P] [--cases N] [--seconds T]``: the
structural fuzz of every protocol (or one), its table, the invalid cases by rule and the first
failures; exit 1 on any finding."""

from __future__ import annotations

import argparse
import math
import sys

from tests.streams.codecs.structure import PROTOCOLS, subject
from tests.streams.codecs.structure.judge import run
from tests.streams.codecs.structure.mutate import table


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.streams.codecs.structure")
    parser.add_argument("--protocol", choices=PROTOCOLS, action="append")
    parser.add_argument("--cases", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--seconds", type=float, default=math.inf, help="per protocol")
    arguments = parser.parse_args(sys.argv[1:] if argv is None else argv)
    tallies = [
        run(subject(protocol), arguments.cases, arguments.seed, arguments.seconds)
        for protocol in arguments.protocol or PROTOCOLS
    ]
    print(table(tallies))
    for tally in tallies:
        rules = ", ".join(f"{k} {v:,}" for k, v in sorted(tally.rules.items()))
        print(f"{tally.protocol}: invalid by rule: {rules}")
        for failure in tally.failures:
            print(failure)
    return 0 if all(t.clean for t in tallies) else 1


if __name__ == "__main__":
    sys.exit(main())
