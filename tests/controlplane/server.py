"""A real control plane for the test suite: etcd and kube-apiserver as plain processes on loopback.

The model is controller-runtime's envtest: etcd with ``--unsafe-no-fsync`` on a private data
directory, kube-apiserver with a secure port on 127.0.0.1, an admin credential (a static token in
``system:masters``), ``--authorization-mode=RBAC``, and service-account signing keys so that
TokenRequest issues tokens a test can hand to the scheduler. No controller manager, scheduler or
kubelet runs: namespaces never finish terminating, no ServiceAccount is made for a namespace, no Pod
is started. The ServiceAccount admission plugin is therefore off (it would refuse every Pod of a
namespace without a ``default`` ServiceAccount); everything else is the server's default.

The binaries come from ``hack/controlplane/build.sh`` (pinned Go modules, built once into a cache
outside the work tree).
"""

from __future__ import annotations

import base64
import datetime
import ipaddress
import json
import os
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import NameOID

REPO: Final = Path(__file__).resolve().parents[2]
BUILD_SCRIPT: Final = REPO / "hack" / "controlplane" / "build.sh"
ADMIN_USER: Final = "kruntimes-test-admin"
START_TIMEOUT: Final = 60.0
"""kube-apiserver is ready in about 4 s on an idle two-core machine; a loaded one takes longer."""


class ControlPlaneError(RuntimeError):
    """The control plane could not be built, started or reached; the message says which and where the logs are."""


@dataclass(frozen=True, slots=True)
class Binaries:
    kube_apiserver: Path
    etcd: Path


def build_binaries() -> Binaries:
    """Build what is missing (a no-op when the cache holds both) and return the binaries' paths."""
    done = subprocess.run(["bash", str(BUILD_SCRIPT)], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise ControlPlaneError(f"{BUILD_SCRIPT} failed ({done.returncode}):\n{done.stderr[-4000:]}")
    paths = dict(line.split("=", 1) for line in done.stdout.splitlines() if "=" in line)
    return Binaries(kube_apiserver=Path(paths["kube-apiserver"]), etcd=Path(paths["etcd"]))


PORT_TRIES: Final = 3
"""Starts of one server on newly picked ports when the last ones were taken."""


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _pem_cert(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def _pem_key(key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _serving_certificate(
    ca_name: x509.Name, ca_key: ec.EllipticCurvePrivateKey, common_name: str, now: datetime.datetime
) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    """A server certificate for 127.0.0.1 (and the in-cluster names) signed by the test CA."""
    key = ec.generate_private_key(ec.SECP256R1())
    certificate = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=7))
        .add_extension(
            x509.SubjectAlternativeName(
                [
                    x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                    x509.DNSName("localhost"),
                    x509.DNSName("kubernetes.default.svc"),
                ]
            ),
            critical=False,
        )
        .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        # Python 3.13's default context verifies strictly (VERIFY_X509_STRICT): it wants the issuer's key id
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    return certificate, key


def _write_credentials(directory: Path) -> None:
    """A CA; the server's certificate for 127.0.0.1 and the fault proxy's, both signed by it; the
    service-account key pair."""
    now = datetime.datetime.now(datetime.timezone.utc)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kruntimes-test-ca")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=7))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True, key_cert_sign=True, crl_sign=True, content_commitment=False,
                key_encipherment=False, data_encipherment=False, key_agreement=False,
                encipher_only=False, decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    serving, serving_key = _serving_certificate(ca_name, ca_key, "kube-apiserver", now)
    proxy, proxy_key = _serving_certificate(ca_name, ca_key, "kruntimes-fault-proxy", now)
    sa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    files = {
        "ca.crt": _pem_cert(ca),
        "apiserver.crt": _pem_cert(serving),
        "apiserver.key": _pem_key(serving_key),
        "proxy.crt": _pem_cert(proxy),
        "proxy.key": _pem_key(proxy_key),
        "sa.key": _pem_key(sa_key),
        "sa.pub": sa_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        ),
    }
    for name, data in files.items():
        path = directory / name
        path.write_bytes(data)
        path.chmod(0o600)


def kubeconfig_text(server: str, ca_pem: bytes, token: str, *, user: str, namespace: str = "default") -> str:
    """A kubeconfig for one server, one bearer token, one context (JSON is YAML)."""
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "kruntimes-test",
                "cluster": {
                    "server": server,
                    "certificate-authority-data": base64.b64encode(ca_pem).decode(),
                },
            }
        ],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [
            {"name": user, "context": {"cluster": "kruntimes-test", "user": user, "namespace": namespace}}
        ],
        "current-context": user,
    }
    return json.dumps(config, indent=2)


def _write_private(path: Path, text: str) -> Path:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(text)
    return path


@dataclass(slots=True)
class _Process:
    name: str
    argv: list[str]
    log: Path
    popen: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with self.log.open("ab") as out:
            self.popen = subprocess.Popen(
                self.argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True
            )

    @property
    def pid(self) -> int | None:
        return None if self.popen is None else self.popen.pid

    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def stop(self, timeout: float = 15.0) -> None:
        popen = self.popen
        if popen is None or popen.poll() is not None:
            return
        popen.send_signal(signal.SIGTERM)
        try:
            popen.wait(timeout)
        except subprocess.TimeoutExpired:
            popen.kill()
            popen.wait(timeout)


@dataclass(slots=True)
class ControlPlane:
    """etcd and kube-apiserver on loopback, in ``directory`` (data, credentials, logs)."""

    directory: Path
    binaries: Binaries
    etcd_port: int = field(default_factory=free_port)
    etcd_peer_port: int = field(default_factory=free_port)
    apiserver_port: int = field(default_factory=free_port)
    admin_token: str = field(default_factory=lambda: secrets.token_urlsafe(24))
    _etcd: _Process | None = None
    _apiserver: _Process | None = None

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.apiserver_port}"

    @property
    def ca_pem(self) -> bytes:
        return (self.directory / "ca.crt").read_bytes()

    @property
    def etcd_data(self) -> Path:
        return self.directory / "etcd-data"

    @property
    def admin_kubeconfig(self) -> Path:
        return self.directory / "admin.kubeconfig"

    def pids(self) -> list[int]:
        return [p.pid for p in (self._etcd, self._apiserver) if p is not None and p.pid is not None and p.alive()]

    # --- life cycle ---

    def start(self) -> ControlPlane:
        self.directory.mkdir(parents=True, exist_ok=True)
        self.directory.chmod(0o700)
        _write_credentials(self.directory)
        _write_private(self.directory / "tokens.csv", f"{self.admin_token},{ADMIN_USER},{ADMIN_USER},system:masters\n")
        _write_private(
            self.admin_kubeconfig, kubeconfig_text(self.server, self.ca_pem, self.admin_token, user=ADMIN_USER)
        )
        try:
            self._start_on_free_ports(self.start_etcd, self._other_etcd_ports)
            self._start_on_free_ports(self.start_apiserver, self._other_apiserver_port)
        except BaseException:
            self.stop()
            raise
        return self

    def _start_on_free_ports(self, start: Callable[[], None], other_ports: Callable[[], None]) -> None:
        """Start a server on the ports picked for it, or on others when one was taken meanwhile:
        :func:`free_port` only finds a port free, and any process (a client's outgoing connection
        among them) may take it before the server binds it."""
        for attempt in range(1, PORT_TRIES + 1):
            try:
                start()
                return
            except ControlPlaneError as failed:
                if attempt == PORT_TRIES or "address already in use" not in str(failed):
                    raise
                other_ports()

    def _other_etcd_ports(self) -> None:
        self.stop_etcd()
        shutil.rmtree(self.etcd_data, ignore_errors=True)  # a first start: nothing in it yet
        self.etcd_port, self.etcd_peer_port = free_port(), free_port()

    def _other_apiserver_port(self) -> None:
        self.stop_apiserver()
        self.apiserver_port = free_port()
        _write_private(
            self.admin_kubeconfig, kubeconfig_text(self.server, self.ca_pem, self.admin_token, user=ADMIN_USER)
        )

    def start_etcd(self) -> None:
        client = f"http://127.0.0.1:{self.etcd_port}"
        peer = f"http://127.0.0.1:{self.etcd_peer_port}"
        self._etcd = _Process(
            "etcd",
            [
                str(self.binaries.etcd),
                "--name=test",
                f"--data-dir={self.etcd_data}",
                f"--listen-client-urls={client}",
                f"--advertise-client-urls={client}",
                f"--listen-peer-urls={peer}",
                f"--initial-advertise-peer-urls={peer}",
                f"--initial-cluster=test={peer}",
                "--unsafe-no-fsync=true",
                "--log-level=warn",
            ],
            self.directory / "etcd.log",
        )
        self._etcd.start()
        self._wait("etcd", lambda: _http_ok(f"{client}/health"))

    def start_apiserver(self) -> None:
        d = self.directory
        self._apiserver = _Process(
            "kube-apiserver",
            [
                str(self.binaries.kube_apiserver),
                f"--etcd-servers=http://127.0.0.1:{self.etcd_port}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                "--endpoint-reconciler-type=none",  # loopback is no endpoint for the kubernetes Service
                f"--secure-port={self.apiserver_port}",
                f"--tls-cert-file={d / 'apiserver.crt'}",
                f"--tls-private-key-file={d / 'apiserver.key'}",
                f"--cert-dir={d / 'certs'}",
                f"--token-auth-file={d / 'tokens.csv'}",
                "--authorization-mode=RBAC",
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                f"--service-account-key-file={d / 'sa.pub'}",
                f"--service-account-signing-key-file={d / 'sa.key'}",
                "--service-cluster-ip-range=10.0.0.0/24",
                "--disable-admission-plugins=ServiceAccount",
                "--profiling=false",
                "--v=1",
            ],
            d / "kube-apiserver.log",
        )
        self._apiserver.start()
        self._wait("kube-apiserver", self._apiserver_ready)

    def stop_apiserver(self) -> None:
        if self._apiserver is not None:
            self._apiserver.stop()

    def stop_etcd(self) -> None:
        if self._etcd is not None:
            self._etcd.stop()

    def stop(self) -> None:
        self.stop_apiserver()
        self.stop_etcd()

    def restart_apiserver(self) -> None:
        """Stop kube-apiserver and start it again on the same port, etcd untouched."""
        self.stop_apiserver()
        self.start_apiserver()

    def save_etcd(self, target: Path) -> None:
        """A copy of etcd's data directory, taken with both servers stopped for a moment."""
        self.stop()
        shutil.copytree(self.etcd_data, target)
        self.start_etcd()
        self.start_apiserver()

    def restore_etcd(self, snapshot: Path) -> None:
        """Put etcd back to ``snapshot`` (an earlier revision: resourceVersions go backwards)."""
        self.stop()
        shutil.rmtree(self.etcd_data)
        shutil.copytree(snapshot, self.etcd_data)
        self.start_etcd()
        self.start_apiserver()

    # --- reading the server ---

    def _ssl(self) -> ssl.SSLContext:
        return ssl.create_default_context(cadata=self.ca_pem.decode())

    def request(self, method: str, path: str, body: object | None = None) -> object:
        """One request as the admin; JSON in and out. Raises ``urllib.error.HTTPError`` on a non-2xx."""
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            f"{self.server}{path}",
            data=data,
            method=method,
            headers={"Authorization": f"Bearer {self.admin_token}", "Content-Type": "application/json"},
        )
        return self._send(request)

    def _send(self, request: urllib.request.Request) -> object:
        """Send; a 429 (a server just started, priority and fairness) is retried after its Retry-After, as kubectl does."""
        for _ in range(30):
            try:
                with urllib.request.urlopen(request, context=self._ssl(), timeout=30) as answer:
                    return json.loads(answer.read() or b"null")
            except urllib.error.HTTPError as refused:
                if refused.code != 429:
                    raise
                time.sleep(min(float(refused.headers.get("Retry-After") or 1), 2.0))
        raise ControlPlaneError(f"{request.full_url}: still 429 Too Many Requests after 30 tries")

    def request_patch(self, path: str, patch: object) -> object:
        """A JSON merge patch as the admin."""
        request = urllib.request.Request(
            f"{self.server}{path}",
            data=json.dumps(patch).encode(),
            method="PATCH",
            headers={"Authorization": f"Bearer {self.admin_token}", "Content-Type": "application/merge-patch+json"},
        )
        return self._send(request)

    def _apiserver_ready(self) -> bool:
        try:
            request = urllib.request.Request(
                f"{self.server}/readyz", headers={"Authorization": f"Bearer {self.admin_token}"}
            )
            with urllib.request.urlopen(request, context=self._ssl(), timeout=5) as answer:
                return bool(answer.status == 200)
        except (OSError, urllib.error.URLError):
            return False

    def _wait(self, name: str, ready: object) -> None:
        assert callable(ready)
        process = self._etcd if name == "etcd" else self._apiserver
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if process is not None and not process.alive():
                raise ControlPlaneError(f"{name} exited during start-up; see {process.log}:\n{_tail(process.log)}")
            if ready():
                return
            time.sleep(0.1)
        raise ControlPlaneError(f"{name} not ready after {START_TIMEOUT:.0f} s; see {self.directory}")

    # --- credentials for tests ---

    def create_namespace(self, name: str) -> None:
        self.request("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})

    def service_account_token(self, namespace: str, name: str, *, seconds: int = 3600) -> str:
        """A TokenRequest token for ``namespace/name`` (the ServiceAccount must exist)."""
        answer = self.request(
            "POST",
            f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token",
            {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": seconds}},
        )
        assert isinstance(answer, dict)
        return str(answer["status"]["token"])

    def service_account_kubeconfig(
        self, path: Path, namespace: str, name: str, *, context_namespace: str = "default", server: str | None = None
    ) -> Path:
        """A kubeconfig with a fresh token of ``namespace/name``; ``server`` (a fault proxy's address,
        whose certificate the same CA signed) instead of the API server's own."""
        token = self.service_account_token(namespace, name)
        return _write_private(
            path,
            kubeconfig_text(server or self.server, self.ca_pem, token, user=f"{namespace}-{name}", namespace=context_namespace),
        )

    @property
    def proxy_credentials(self) -> tuple[Path, Path]:
        """The certificate and key a fault proxy in front of this server serves (signed by its CA)."""
        return self.directory / "proxy.crt", self.directory / "proxy.key"


def _http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as answer:
            return bool(answer.status == 200)
    except (OSError, urllib.error.URLError):
        return False


def _tail(path: Path, lines: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"
