"""The real ``kubectl``, as the tests of both servers (the dev cluster and kube-apiserver) run it."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, cast


class Kubectl:
    """``kubectl`` on PATH pointed at one server through ``kubeconfig``.

    The environment's ``KUBE*`` variables are dropped so that nothing of the user's own
    configuration reaches the server under test. ``cache_dir`` (when given) holds kubectl's
    discovery cache and, as ``HOME``'s child, its other files; ``env`` adds or overrides
    variables (an operator's ``PATH`` with a plugin first, say). ``timeout`` bounds one
    command: only a hang meets it.
    """

    def __init__(
        self,
        kubeconfig: Path,
        cache_dir: Path | None = None,
        *,
        server: Literal["dev", "real"] = "dev",
        env: Mapping[str, str] | None = None,
        timeout: float = 120.0,
    ) -> None:
        self.kubeconfig = kubeconfig
        self.cache_dir = cache_dir
        self.server = server
        """Which server the kubeconfig names: the dev cluster, or a real kube-apiserver."""
        self.timeout = timeout
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("KUBE")}
        self.env["KUBECONFIG"] = str(kubeconfig)
        if cache_dir is not None:
            self.env["HOME"] = str(cache_dir.parent)
        self.env.update(env or {})

    def argv(self, args: Sequence[str]) -> list[str]:
        cache = [] if self.cache_dir is None else ["--cache-dir", str(self.cache_dir)]
        return ["kubectl", *cache, *args]

    def __call__(self, *args: str, stdin: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
        """Run ``kubectl ARGS``; with ``check``, a non-zero exit fails the test with kubectl's own words."""
        proc = subprocess.run(
            self.argv(args), input=stdin, capture_output=True, text=True, env=self.env, timeout=self.timeout, check=False
        )
        if check and proc.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
        return proc

    def ok(self, *args: str, stdin: str | None = None) -> str:
        """The standard output of a command that must succeed."""
        return self(*args, stdin=stdin).stdout

    def refused(self, *args: str, stdin: str | None = None) -> str:
        """Both streams of a command that must fail."""
        done = self(*args, stdin=stdin, check=False)
        assert done.returncode != 0, f"kubectl {' '.join(args)} was accepted:\n{done.stdout}"
        return done.stdout + done.stderr

    def json(self, *args: str) -> dict[str, Any]:
        return cast(dict[str, Any], json.loads(self.ok(*args, "-o", "json")))

    def popen(self, *args: str) -> subprocess.Popen[str]:
        return subprocess.Popen(self.argv(args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=self.env)
