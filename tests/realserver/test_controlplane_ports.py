"""The test control plane starts even when a port picked for it is taken before its server binds it
(another process's connection may take any free port): it picks others and says so in its kubeconfig."""

from __future__ import annotations

import json
import socket
import subprocess
from pathlib import Path

from tests.controlplane.server import ControlPlane, build_binaries


def test_a_plane_whose_ports_were_taken_meanwhile_starts_on_others(tmp_path: Path) -> None:
    with socket.socket() as etcd_holder, socket.socket() as apiserver_holder:
        for holder in (etcd_holder, apiserver_holder):
            holder.bind(("127.0.0.1", 0))
            holder.listen()
        taken_etcd, taken_apiserver = etcd_holder.getsockname()[1], apiserver_holder.getsockname()[1]
        plane = ControlPlane(tmp_path / "plane", build_binaries(), etcd_port=taken_etcd, apiserver_port=taken_apiserver)
        plane.start()
        try:
            assert plane.etcd_port != taken_etcd and plane.apiserver_port != taken_apiserver
            # the admin's kubeconfig names the port the server listens on
            done = subprocess.run(
                ["kubectl", "--kubeconfig", str(plane.admin_kubeconfig), "get", "--raw", "/readyz"],
                capture_output=True, text=True, timeout=60, check=False,
            )
            assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr
            assert json.dumps(plane.request("GET", "/api/v1/namespaces/default"))
        finally:
            plane.stop()
