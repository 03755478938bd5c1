"""A small fake Kubernetes API server on 127.0.0.1: exactly the REST paths the CoreWeave platform uses.

The real `kubernetes` client talks to it through a kubeconfig the test writes, so the
platform never knows. It serves cluster-scoped NodePool custom objects
(`/apis/compute.coreweave.com/v1alpha1/nodepools`) and namespaced Pods
(`/api/v1/namespaces/{ns}/pods`): create (201; 409 when the name exists), get, list
with equality label selectors, delete; every object gets a uid, a creationTimestamp
and a resourceVersion from one counter, as a real server does. Errors are `Status`
JSON. Request bodies are always read before answering (keep-alive connections).

A NodePool's status speaks CoreWeave's documented fields only: `status.currentNodes` (the
CURRENT column of `kubectl get nodepool`: Nodes booted, registered with the Node Pool and
present in the cluster, against TARGET, `spec.targetNodes`) and `status.conditions`, where
`AtTarget` says whether CURRENT has reached TARGET and `Valid` whether the NodePool is
acceptable. A new NodePool has CURRENT 0, `Valid` True and `AtTarget` False.

Nothing becomes ready by itself: the test drives status (`set_current_nodes`,
`add_condition`, `set_status`, `set_pod_ready`, `set_pod_waiting`) or hooks object creation and
deletion (`FakeKubelet` in fake_kubelet.py plays the node that way).
Every request lands in `calls` with its method, path, labels and status code.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import re
import ssl
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

NODEPOOLS = "/apis/compute.coreweave.com/v1alpha1/nodepools"
_NODEPOOL_RE = re.compile(r"^/apis/compute\.coreweave\.com/v1alpha1/nodepools(?:/([^/]+))?$")
_POD_RE = re.compile(r"^/api/v1/namespaces/([^/]+)/pods(?:/([^/]+))?$")


@dataclass(frozen=True)
class Call:
    """One request as the server saw it."""

    method: str
    path: str
    status: int
    labels: dict[str, str] = field(default_factory=dict)  # the object's labels (create/get/delete)
    selector: dict[str, str] = field(default_factory=dict)  # a list's labelSelector, parsed
    query: dict[str, str] = field(default_factory=dict)
    authorized: bool = False  # carried the kubeconfig's bearer token
    items: int = -1  # how many objects a list returned (-1: not a list)


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_selector(text: str) -> dict[str, str]:
    """Equality selectors (`a=b,c=d`, `a==b`): all the platform sends."""
    selector: dict[str, str] = {}
    for term in filter(None, (t.strip() for t in text.split(","))):
        key, _, value = term.replace("==", "=").partition("=")
        selector[key] = value
    return selector


def _self_signed(directory: Path) -> tuple[Path, Path]:
    """A key and a self-signed certificate for 127.0.0.1 (its own CA), as ca.crt / tls.key."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "fake-kube-apiserver")])
    now = datetime.now(UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(minutes=5))
        .not_valid_after(now + timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    directory.mkdir(parents=True, exist_ok=True)
    cert_path, key_path = directory / "ca.crt", directory / "tls.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return cert_path, key_path


def _status(code: int, reason: str, message: str, name: str = "", kind: str = "") -> dict[str, Any]:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "details": {"name": name, "kind": kind},
        "code": code,
    }


class FakeKubernetes:
    """The server and its state; `start()` binds 127.0.0.1 on a free port."""

    def __init__(self, tls_dir: Path | None = None, token: str = "fake-token") -> None:
        """`tls_dir`: serve HTTPS with a self-signed certificate for 127.0.0.1 written there (`ca_path`),
        as an in-cluster client expects (it always speaks https to the API server)."""
        self.tls_dir = tls_dir
        self.token = token
        self.lock = threading.RLock()
        self.nodepools: dict[str, dict[str, Any]] = {}
        self.pods: dict[tuple[str, str], dict[str, Any]] = {}
        self.calls: list[Call] = []
        self._version = 0
        self.on_nodepool_created: Callable[[dict[str, Any]], None] | None = None
        self.on_pod_created: Callable[[dict[str, Any]], None] | None = None
        # Given, a deleted Pod keeps a deletionTimestamp and this runs (in a thread) until it calls remove_pod.
        self.on_pod_deleting: Callable[[dict[str, Any]], None] | None = None
        self.reject_nodepool_create: tuple[int, str, str] | None = None  # (code, reason, message)
        self.refusals: dict[tuple[str, str], tuple[int, str, str]] = {}  # (method, path) -> (code, reason, message)
        self.pod_delete_delay = 0.0  # seconds a deleted Pod lingers with a deletionTimestamp
        self._server: ThreadingHTTPServer | None = None

    # -- lifecycle ---------------------------------------------------------------------------------------

    def start(self) -> None:
        fake = self

        class Handler(_Handler):
            server_fake = fake

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        if self.tls_dir is not None:
            cert, key = _self_signed(self.tls_dir)
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(cert, key)
            self._server.socket = context.wrap_socket(self._server.socket, server_side=True)
        # shutdown() waits for serve_forever's next look at its flag: every 0.5 s by default, each test's last 0.5 s
        threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, name="fake-k8s", daemon=True
        ).start()

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    @property
    def port(self) -> int:
        assert self._server is not None
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        return f"{'https' if self.tls_dir else 'http'}://127.0.0.1:{self.port}"

    @property
    def ca_path(self) -> Path:
        assert self.tls_dir is not None
        return self.tls_dir / "ca.crt"

    def write_kubeconfig(self, path: Path, namespace: str = "iris") -> Path:
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
            "users": [{"name": "fake", "user": {"token": self.token}}],
            "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake", "namespace": namespace}}],
            "current-context": "fake",
        }
        path.write_text(json.dumps(config))  # JSON is YAML
        return path

    # -- driving status from the test -------------------------------------------------------------------

    def _bump(self, obj: dict[str, Any]) -> None:
        self._version += 1
        obj["metadata"]["resourceVersion"] = str(self._version)

    def seed_nodepool(self, name: str, labels: dict[str, str], ready: int = 1) -> None:
        """A NodePool that exists before the test's clients start (e.g. left behind by a dead controller)."""
        with self.lock:
            body = {"metadata": {"name": name, "labels": labels}, "spec": {"targetNodes": 1}}
            pool = self._create(self.nodepools, name, body)
            pool["status"] = new_nodepool_status()
            count_nodes(pool, ready)

    def set_current_nodes(self, name: str, current: int) -> None:
        """CURRENT becomes `current`, and `AtTarget` says whether that reaches TARGET."""
        with self.lock:
            pool = self.nodepools[name]
            count_nodes(pool, current)
            self._bump(pool)

    def set_status(self, name: str, status: dict[str, Any]) -> None:
        """Replace a NodePool's whole status (e.g. none at all, or fields the docs do not name)."""
        with self.lock:
            pool = self.nodepools[name]
            pool["status"] = status
            self._bump(pool)

    def add_condition(self, name: str, type_: str, status: str, reason: str, message: str = "") -> None:
        with self.lock:
            pool = self.nodepools[name]
            pool["status"].setdefault("conditions", []).append(
                {"type": type_, "status": status, "reason": reason, "message": message, "lastTransitionTime": _now()}
            )
            self._bump(pool)

    def set_pod_ready(self, namespace: str, name: str, host_ip: str = "127.0.0.1") -> None:
        with self.lock:
            pod = self.pods[(namespace, name)]
            pod["status"] = {
                "phase": "Running",
                "hostIP": host_ip,
                "podIP": host_ip,
                "conditions": [{"type": "Ready", "status": "True"}],
                "containerStatuses": [
                    {"name": c["name"], "ready": True, "restartCount": 0, "image": c["image"], "imageID": "",
                     "state": {"running": {"startedAt": _now()}}}
                    for c in pod["spec"]["containers"]
                ],
            }  # fmt: skip
            self._bump(pod)

    def set_pod_failed(self, namespace: str, name: str, reason: str) -> None:
        with self.lock:
            pod = self.pods.get((namespace, name))
            if pod is None:
                return
            pod["status"] = {"phase": "Failed", "reason": reason, "conditions": [{"type": "Ready", "status": "False"}]}
            self._bump(pod)

    def set_pod_waiting(self, namespace: str, name: str, reason: str, restarts: int = 0, message: str = "") -> None:
        with self.lock:
            pod = self.pods[(namespace, name)]
            pod["status"] = {
                "phase": "Pending",
                "conditions": [{"type": "Ready", "status": "False"}],
                "containerStatuses": [
                    {"name": c["name"], "ready": False, "restartCount": restarts, "image": c["image"], "imageID": "",
                     "state": {"waiting": {"reason": reason, "message": message}}}
                    for c in pod["spec"]["containers"]
                ],
            }  # fmt: skip
            self._bump(pod)

    async def wait_for_pod(self, namespace: str, name: str, timeout: float = 30.0) -> dict[str, Any]:
        """The Pod once a client has created it (polling: the server runs in its own thread)."""
        deadline = asyncio.get_running_loop().time() + timeout
        while True:
            with self.lock:
                pod = self.pods.get((namespace, name))
            if pod is not None:
                return pod
            if asyncio.get_running_loop().time() > deadline:
                raise AssertionError(f"Pod {namespace}/{name} not created within {timeout} s")
            await asyncio.sleep(0.02)

    def calls_to(self, method: str, prefix: str = "") -> list[Call]:
        with self.lock:
            return [c for c in self.calls if c.method == method and c.path.startswith(prefix)]

    # -- the API --------------------------------------------------------------------------------------------

    def handle(self, method: str, path: str, query: dict[str, str], body: Any) -> tuple[int, dict[str, Any]]:
        with self.lock:
            if (method, path) in self.refusals:
                code, reason, message = self.refusals[(method, path)]
                return code, _status(code, reason, message)
            if m := _NODEPOOL_RE.match(path):
                return self._nodepools(method, m.group(1), query, body)
            if m := _POD_RE.match(path):
                return self._pods(method, m.group(1), m.group(2), query, body)
            return 404, _status(404, "NotFound", f"the server could not find the requested resource ({path})")

    def _create(self, store: dict[Any, dict[str, Any]], key: Any, body: dict[str, Any]) -> dict[str, Any]:
        obj = json.loads(json.dumps(body))
        meta = obj.setdefault("metadata", {})
        meta.update(uid=str(uuid.uuid4()), creationTimestamp=_now(), generation=1)
        meta.setdefault("labels", {})
        obj.setdefault("status", {})
        self._bump(obj)
        store[key] = obj
        return obj

    def _list(self, objects: list[dict[str, Any]], query: dict[str, str], kind: str) -> dict[str, Any]:
        selector = parse_selector(query.get("labelSelector", ""))
        items = [o for o in objects if all(o["metadata"]["labels"].get(k) == v for k, v in selector.items())]
        return {
            "apiVersion": "v1" if kind == "PodList" else "compute.coreweave.com/v1alpha1",
            "kind": kind,
            "metadata": {"resourceVersion": str(self._version)},
            "items": items,
        }

    def _nodepools(self, method: str, name: str | None, query: dict[str, str], body: Any) -> tuple[int, Any]:
        if name is None and method == "GET":
            return 200, self._list(list(self.nodepools.values()), query, "NodePoolList")
        if name is None and method == "POST":
            new_name = body["metadata"]["name"]
            if self.reject_nodepool_create is not None:
                code, reason, message = self.reject_nodepool_create
                return code, _status(code, reason, message, new_name, "nodepools")
            if new_name in self.nodepools:
                return 409, _status(409, "AlreadyExists", f'nodepools "{new_name}" already exists', new_name)
            pool = self._create(self.nodepools, new_name, body)
            pool["status"] = new_nodepool_status()
            if self.on_nodepool_created is not None:
                self.on_nodepool_created(pool)
            return 201, pool
        if name is not None and name not in self.nodepools:
            return 404, _status(404, "NotFound", f'nodepools.compute.coreweave.com "{name}" not found', name)
        if name is not None and method == "GET":
            return 200, self.nodepools[name]
        if name is not None and method == "DELETE":
            return 200, self.nodepools.pop(name)
        return 405, _status(405, "MethodNotAllowed", f"{method} not supported here")

    def _pods(self, method: str, ns: str, name: str | None, query: dict[str, str], body: Any) -> tuple[int, Any]:
        if name is None and method == "GET":
            return 200, self._list([p for (n, _), p in self.pods.items() if n == ns], query, "PodList")
        if name is None and method == "POST":
            new_name = body["metadata"]["name"]
            if (ns, new_name) in self.pods:
                return 409, _status(409, "AlreadyExists", f'pods "{new_name}" already exists', new_name, "pods")
            pod = self._create(self.pods, (ns, new_name), body)
            pod["metadata"]["namespace"] = ns
            pod["status"] = {"phase": "Pending", "conditions": []}
            if self.on_pod_created is not None:
                self.on_pod_created(pod)
            return 201, pod
        if name is not None and (ns, name) not in self.pods:
            return 404, _status(404, "NotFound", f'pods "{name}" not found', name, "pods")
        if name is not None and method == "GET":
            return 200, self.pods[(ns, name)]
        if name is not None and method == "DELETE":
            pod = self.pods[(ns, name)]
            if self.on_pod_deleting is not None or self.pod_delete_delay > 0:
                first = "deletionTimestamp" not in pod["metadata"]
                pod["metadata"].setdefault("deletionTimestamp", _now())
                self._bump(pod)
                if self.on_pod_deleting is not None and first:
                    threading.Thread(target=self.on_pod_deleting, args=(pod,), daemon=True).start()
                elif self.on_pod_deleting is None:
                    threading.Timer(self.pod_delete_delay, self.remove_pod, (ns, name)).start()
            else:
                self.remove_pod(ns, name)
            return 200, pod
        return 405, _status(405, "MethodNotAllowed", f"{method} not supported here")

    def remove_pod(self, ns: str, name: str) -> None:
        """The Pod's containers have stopped: it disappears from the API."""
        with self.lock:
            self.pods.pop((ns, name), None)


def new_nodepool_status() -> dict[str, Any]:
    """What a just-accepted NodePool reports: no node yet, valid, not at target."""
    return {
        "currentNodes": 0,
        "conditions": [
            {"type": "Valid", "status": "True", "reason": "Valid", "message": "", "lastTransitionTime": _now()},
            {"type": "AtTarget", "status": "False", "reason": "UnderTarget", "message": "",
             "lastTransitionTime": _now()},
        ],
    }  # fmt: skip


def count_nodes(pool: dict[str, Any], current: int) -> None:
    """Set CURRENT and the AtTarget condition that follows from it (TARGET is `spec.targetNodes`)."""
    status = pool.setdefault("status", {})
    status["currentNodes"] = current
    at_target = current >= int(pool["spec"].get("targetNodes", 1))
    conditions = [c for c in status.get("conditions", []) if c.get("type") != "AtTarget"]
    conditions.append({"type": "AtTarget", "status": "True" if at_target else "False",
                       "reason": "AtTarget" if at_target else "UnderTarget", "message": "",
                       "lastTransitionTime": _now()})  # fmt: skip
    status["conditions"] = conditions


def _bearer(header: str) -> str:
    """The token of an `Authorization: Bearer <token>` header (the scheme is case-insensitive)."""
    scheme, _, token = header.partition(" ")
    return token.strip() if scheme.lower() == "bearer" else ""


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_fake: FakeKubernetes

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the request log is `calls`."""

    def _serve(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""  # always drain the body (keep-alive)
        split = urlsplit(self.path)
        query = {k: v[-1] for k, v in parse_qs(split.query).items()}
        try:
            body = json.loads(raw) if raw else None
        except json.JSONDecodeError:
            body = None
        fake = self.server_fake
        if self.command in ("POST", "PUT") and not isinstance(body, dict):
            code, answer = 400, _status(400, "BadRequest", "request body must be a JSON object")
        else:
            code, answer = fake.handle(self.command, split.path, query, body)
        labels = (body or {}).get("metadata", {}).get("labels") if self.command == "POST" else None
        if labels is None and answer.get("kind") not in ("Status", "PodList", "NodePoolList"):
            labels = answer.get("metadata", {}).get("labels")
        call = Call(
            method=self.command,
            path=split.path,
            status=code,
            labels=dict(labels or {}),
            selector=parse_selector(query.get("labelSelector", "")),
            query=query,
            authorized=_bearer(self.headers.get("Authorization", "")) == fake.token,
            items=len(answer["items"]) if "items" in answer else -1,
        )
        with fake.lock:
            fake.calls.append(call)
        data = json.dumps(answer).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _serve  # noqa: N815 - http.server's handler names
