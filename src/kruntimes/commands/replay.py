"""`kruntimes replay FILE`: re-plan every logged cycle and diff the decisions.

Each line of a cycle log (written by the scheduler or ``kruntimes simulate
--cycle-log``) holds one cycle's whole snapshot, the score plugins' names and
weights and the plan. Replay rebuilds the registry from those names and weights,
runs ``plan_cycle`` on the snapshot and compares: planning is a pure function,
so any difference means the planner changed (or the record was edited).

A record that was too large for the log is there as a truncation marker (the
Run's key, the action, the size; no inputs): it is not replayable, and is counted
and listed as such, not treated as malformed.

Exit status: 0 every replayable record identical; 1 some differ (the first ones
are shown field by field); 2 the file is unreadable or malformed (line number and
why), or names a plugin this build does not have.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, TextIO

from returns.pipeline import is_successful

from kruntimes.pure.readers.cyclelog import CycleRecord, FieldDiff, PluginWeights, TruncatedRecord, decode_line, diff_plans
from kruntimes.pure.framework.registry import Registry
from kruntimes.pure.planner import plan_cycle
from kruntimes.pure.plugins.registry import DEFAULT_REGISTRY

EXIT_IDENTICAL: Final = 0
EXIT_DIFFERENT: Final = 1
EXIT_MALFORMED: Final = 2
SHOW_RECORDS: Final = 5
"""Show at most this many differing records (the first ones, in file order)."""

_EPILOG: Final = """\
  kruntimes simulate --cycle-log cycles.jsonl examples/weighted-scoring.yaml
  kruntimes replay cycles.jsonl        # 12 of 12 records identical

Blank lines are skipped; records too large for the log (truncation markers) are
listed as not replayable. Exit 0: all replayable records identical; 1: differences
(shown); 2: malformed.
"""


def configure(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = _EPILOG
    parser.add_argument("file", metavar="FILE", help="cycle log: one JSON cycle record per line; - reads stdin")


@dataclass(frozen=True, slots=True)
class Difference:
    line: int
    record: CycleRecord
    fields: tuple[FieldDiff, ...]


class _Malformed(Exception):
    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


@dataclass(frozen=True, slots=True)
class Lines:
    """A cycle log's lines: the records, and the markers of records too large for the log."""

    records: list[tuple[int, CycleRecord]]
    truncated: list[tuple[int, TruncatedRecord]]


def _read_records(stream: TextIO, source: str) -> Lines:
    lines = Lines([], [])
    for number, line in enumerate(stream, start=1):
        if not line.strip():
            continue
        decoded = decode_line(line)
        if not is_successful(decoded):
            raise _Malformed(f"{source}:{number}: malformed cycle record: {decoded.failure()}")
        read = decoded.unwrap()
        if isinstance(read, TruncatedRecord):
            lines.truncated.append((number, read))
        else:
            lines.records.append((number, read))
    return lines


def registry_for(record: CycleRecord, cache: dict[tuple[PluginWeights, tuple[str, ...]], Registry]) -> Registry:
    """The default registry with the logged weights; ``_Malformed`` names a plugin this build lacks.

    Logged filters (when the writer logged them) must be the default filters in
    the default order: filters have no weights, so there is nothing to rebuild.
    """
    key = (record.weights, record.filters)
    if key in cache:
        return cache[key]
    known_filters = tuple(entry.name for entry in DEFAULT_REGISTRY.filters)
    for name in record.filters:
        if name not in known_filters:
            raise _Malformed(
                f'filter plugin "{name}" is not in this build\'s registry (known: {", ".join(known_filters)})'
            )
    if record.filters and record.filters != known_filters:
        raise _Malformed(f"logged filters {', '.join(record.filters)} differ from this build's {', '.join(known_filters)}")
    known = {name for name, _ in DEFAULT_REGISTRY.weights}
    for name, _ in record.weights:
        if name not in known:
            raise _Malformed(
                f'score plugin "{name}" is not in this build\'s registry (known: {", ".join(sorted(known))})'
            )
    built = DEFAULT_REGISTRY.with_weights(record.weights)
    if not is_successful(built):
        raise _Malformed(f"cannot rebuild the registry: {built.failure()}")
    cache[key] = built.unwrap()
    return cache[key]


def replay(records: Sequence[tuple[int, CycleRecord]]) -> list[Difference]:
    cache: dict[tuple[PluginWeights, tuple[str, ...]], Registry] = {}
    differences: list[Difference] = []
    for number, record in records:
        try:
            registry = registry_for(record, cache)
        except _Malformed as problem:
            raise _Malformed(f"line {number}: {problem.message}") from None
        replayed = plan_cycle(record.snapshot, registry)
        if replayed != record.plan:
            differences.append(Difference(number, record, diff_plans(record.plan, replayed)))
    return differences


def _report(
    source: str, total: int, differences: Sequence[Difference], out: TextIO, truncated: Sequence[tuple[int, TruncatedRecord]] = ()
) -> None:
    identical = total - len(differences)
    print(f"{source}: {identical} of {total} records identical", file=out)
    if truncated:
        noun = "record was" if len(truncated) == 1 else "records were"
        print(f"{len(truncated)} {noun} too large for the log and not replayable (written as markers):", file=out)
        for number, marker in truncated[:SHOW_RECORDS]:
            print(f"  line {number}, run {marker.key}: {marker.action}, {marker.size} bytes", file=out)
        if len(truncated) > SHOW_RECORDS:
            print(f"  ... and {len(truncated) - SHOW_RECORDS} more", file=out)
    for difference in differences[:SHOW_RECORDS]:
        print(f"\nline {difference.line}, run {difference.record.snapshot.key}:", file=out)
        width = max(len(f.path) for f in difference.fields)
        for field in difference.fields:
            print(f"  {field.path.ljust(width)}  logged {field.logged}", file=out)
            print(f"  {''.ljust(width)}  replay {field.replayed}", file=out)
    if len(differences) > SHOW_RECORDS:
        print(f"\n... and {len(differences) - SHOW_RECORDS} more differing records", file=out)


def run(args: argparse.Namespace) -> int:
    path: str = args.file
    try:
        if path == "-":
            lines = _read_records(sys.stdin, "<stdin>")
            source = "<stdin>"
        else:
            source = path
            with open(path, encoding="utf-8") as stream:
                lines = _read_records(stream, path)
        differences = replay(lines.records)
    except _Malformed as problem:
        print(f"kruntimes replay: {problem.message}", file=sys.stderr)
        return EXIT_MALFORMED
    except (OSError, UnicodeDecodeError) as exc:
        print(f"kruntimes replay: {path}: cannot read: {exc}", file=sys.stderr)
        return EXIT_MALFORMED
    _report(source, len(lines.records), differences, sys.stdout, lines.truncated)
    return EXIT_DIFFERENT if differences else EXIT_IDENTICAL
