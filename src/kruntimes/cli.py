"""The entry point, `kruntimes`, and its subcommands; `kubectl-kruntimes` is the same as a kubectl plugin.

Each subcommand lives in its own module that exposes ``configure(parser)`` and
``run(args) -> int``; this file only wires them together. A command line that names its
subcommand imports that one module alone, so ``kruntimes simulate`` never pays for the
Kubernetes client and ``kruntimes scheduler`` starts without the dev cluster's, the demo's
or the other commands' modules (a sixth of its start-up CPU); only the top-level ``--help``
and a line without a subcommand import them all.

kubectl runs an executable named ``kubectl-kruntimes`` found on ``PATH`` for
``kubectl kruntimes ARGS...`` and passes it ``ARGS`` (not kubectl's own flags,
such as a ``-n`` before ``kruntimes``; the environment, ``KUBECONFIG`` included,
is inherited), so ``kubectl_main`` is ``main`` under the name kubectl users type.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from typing import Protocol, cast

from kruntimes import __version__


class _Command(Protocol):
    def configure(self, parser: argparse.ArgumentParser) -> None: ...

    def run(self, args: argparse.Namespace) -> int: ...


# name -> (module, one-line help). Order is the order `--help` lists them.
_COMMANDS: tuple[tuple[str, str, str], ...] = (
    ("simulate", "kruntimes.commands.simulate", "what-if scheduling of a scenario file, offline"),
    ("replay", "kruntimes.commands.replay", "re-plan every record of a cycle log and diff the decisions"),
    ("scheduler", "kruntimes.commands.scheduler", "run the scheduler against a cluster until SIGTERM (the controller)"),
    ("dev-cluster", "kruntimes.devcluster.command", "a local, in-memory Kubernetes API server for development"),
    ("runtime-sim", "kruntimes.commands.runtimesim", "simulated Runtime Pods and Runs on any cluster, to load-test the scheduler"),
    ("explain", "kruntimes.commands.explain", "why a Run is pending: per-pod verdicts and the plan, from a live cluster"),
    ("demo", "kruntimes.commands.demo", "a local cluster, the scheduler and a sample workload, end to end"),
)


def build_parser(
    prog: str = "kruntimes", only: str | None = None
) -> tuple[argparse.ArgumentParser, dict[str, _Command]]:
    """The parser and the subcommands it configured: every one, or with ``only`` just that one
    (the others are listed by name and help but never imported, so parsing cannot reach them)."""
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Schedule kruntimes Runs onto warm Runtime Pods, or explore how it would.",
    )
    parser.add_argument("--version", action="version", version=f"kruntimes {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    commands: dict[str, _Command] = {}
    for name, module_name, help_text in _COMMANDS:
        if only is not None and name != only:
            sub.add_parser(name, help=help_text, description=help_text)
            continue
        try:
            module = cast(_Command, importlib.import_module(module_name))
        except ModuleNotFoundError as exc:
            if exc.name is not None and module_name.startswith(exc.name):
                continue  # a subcommand not built into this installation
            raise
        cmd_parser = sub.add_parser(name, help=help_text, description=help_text)
        module.configure(cmd_parser)
        commands[name] = module
    return parser, commands


def main(argv: Sequence[str] | None = None, *, prog: str = "kruntimes") -> int:
    if argv is None and sys.argv[1:2] == ["scheduler"]:
        # A SIGTERM while the subcommands import must still mean "shut down cleanly".
        from kruntimes.commands.shutdown import catch_early

        catch_early()
    words = list(sys.argv[1:] if argv is None else argv)
    named = words[0] if words and words[0] in {name for name, _, _ in _COMMANDS} else None
    parser, commands = build_parser(prog, only=named)
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help(sys.stderr)
        return 2
    return commands[args.command].run(args)


def kubectl_main() -> int:
    """``kubectl kruntimes SUBCOMMAND ...``: the console script ``kubectl-kruntimes``."""
    return main(prog="kubectl kruntimes")


if __name__ == "__main__":
    raise SystemExit(main())
