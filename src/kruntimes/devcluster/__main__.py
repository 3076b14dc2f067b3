"""``python -m kruntimes.devcluster``: the same as ``kruntimes dev-cluster``, without the other subcommands."""

from __future__ import annotations

import argparse
import sys

from kruntimes.devcluster import command


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m kruntimes.devcluster")
    command.configure(parser)
    return command.run(parser.parse_args())


if __name__ == "__main__":
    sys.exit(main())
