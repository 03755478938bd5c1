"""A fake Cloud TPU API (gRPC, google.cloud.tpu.v2.Tpu + google.longrunning.Operations) and a fake GCE
metadata server (HTTP), both on 127.0.0.1, for the real `tpu_v2.TpuClient` and the real agent to talk to.

The TPU fake keeps nodes in memory: CreateNode answers an unfinished operation with the
node CREATING; the operation finishes (node READY, one network endpoint per VM) after
`polls_to_ready` GetOperation calls. DeleteNode likewise. `fail_next_create` makes the
next create operation end with a gRPC status (8 = RESOURCE_EXHAUSTED for a stockout).
`create_errors` stocks a zone out for good: every create there makes a node that stays
CREATING (until deleted: a caller that does not clean up leaks it) and an operation that ends
with the given status. As the API does, a CreateNode for an accelerator type it does not offer (anywhere, unless
`vms_per_node` says how many VMs any type has, or in a zone of `offered` that lacks it) is
refused at once with INVALID_ARGUMENT; `refusals`
makes a method answer with a status of the test's choosing (e.g. PERMISSION_DENIED).
Every request is logged as (method, request message) for the tests to assert on.
"""

from __future__ import annotations

import hashlib
import http.server
import threading
import time
import urllib.parse
from collections.abc import Callable
from concurrent import futures
from dataclasses import dataclass, field
from typing import Any

import grpc
from google.cloud import tpu_v2
from google.longrunning import operations_pb2
from google.protobuf import any_pb2, empty_pb2
from google.rpc import status_pb2

from scheduler.tpu import tpu_vm_count

TPU_SERVICE = "google.cloud.tpu.v2.Tpu"
OPERATIONS_SERVICE = "google.longrunning.Operations"


@dataclass
class _PendingOp:
    node_name: str
    kind: str  # "create" | "delete"
    polls: int = 0
    error: tuple[int, str] | None = None


@dataclass
class FakeTpu:
    """In-memory TPU nodes behind a real gRPC server."""

    vm_address: str = "127.0.0.1"  # every VM's internal address (the tests' sshd)
    polls_to_ready: int = 1
    vms_per_node: int | None = None  # None: the accelerator type's VM count from Iris's table
    nodes: dict[str, tpu_v2.Node] = field(default_factory=dict)
    requests: list[tuple[str, Any]] = field(default_factory=list)
    fail_next_create: tuple[int, str] | None = None
    refusals: dict[str, tuple[grpc.StatusCode, str]] = field(default_factory=dict)  # method -> answer
    create_errors: dict[str, tuple[int, str]] = field(default_factory=dict)  # zone -> every create's op error
    offered: dict[str, set[str]] = field(default_factory=dict)  # zone -> the only accelerator types it has
    _ops: dict[str, _PendingOp] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _server: grpc.Server | None = None
    port: int = 0

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.port}"

    def methods(self) -> list[str]:
        """The methods called so far, in order (GetOperation polls included)."""
        return [m for m, _ in self.requests]

    # -- Tpu ---------------------------------------------------------------------------------------------

    def _get_node(self, request: tpu_v2.GetNodeRequest, context: grpc.ServicerContext) -> tpu_v2.Node:
        with self._lock:
            node = self.nodes.get(request.name)
        if node is None:
            context.abort(grpc.StatusCode.NOT_FOUND, f"node {request.name} not found")
        return node

    def _list_nodes(self, request: tpu_v2.ListNodesRequest, context: grpc.ServicerContext) -> Any:
        with self._lock:
            nodes = [n for name, n in self.nodes.items() if name.startswith(request.parent + "/")]
        return tpu_v2.ListNodesResponse(nodes=nodes)

    def _create_node(self, request: tpu_v2.CreateNodeRequest, context: grpc.ServicerContext) -> Any:
        name = f"{request.parent}/nodes/{request.node_id}"
        zone = request.parent.rsplit("/", 1)[-1]
        if zone in self.offered and request.node.accelerator_type not in self.offered[zone]:
            message = f"Accelerator type {request.node.accelerator_type!r} is not available in zone {zone}"
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, message)
        if self.vms_per_node is None:
            try:
                tpu_vm_count(request.node.accelerator_type)
            except ValueError:
                zone = request.parent.rsplit("/", 1)[-1]
                message = f"Accelerator type {request.node.accelerator_type!r} is not available in zone {zone}"
                context.abort(grpc.StatusCode.INVALID_ARGUMENT, message)
        with self._lock:
            if name in self.nodes:
                context.abort(grpc.StatusCode.ALREADY_EXISTS, f"node {name} already exists")
            error, self.fail_next_create = self.fail_next_create, None
            zone_error = self.create_errors.get(request.parent.rsplit("/", 1)[-1])
            if error is None and zone_error is not None:
                node = tpu_v2.Node(request.node)
                node.name, node.state = name, tpu_v2.Node.State.CREATING
                self.nodes[name] = node  # left behind by the failed operation, as a cloud may
                return self._new_op(_PendingOp(name, "create", error=zone_error))
            if error is None:
                node = tpu_v2.Node(request.node)
                node.name = name
                node.state = tpu_v2.Node.State.CREATING
                self.nodes[name] = node
            return self._new_op(_PendingOp(name, "create", error=error))

    def _delete_node(self, request: tpu_v2.DeleteNodeRequest, context: grpc.ServicerContext) -> Any:
        with self._lock:
            node = self.nodes.get(request.name)
            if node is None:
                context.abort(grpc.StatusCode.NOT_FOUND, f"node {request.name} not found")
            node.state = tpu_v2.Node.State.DELETING
            return self._new_op(_PendingOp(request.name, "delete"))

    def _new_op(self, op: _PendingOp) -> operations_pb2.Operation:
        name = f"{op.node_name.rsplit('/nodes/', 1)[0]}/operations/op-{len(self._ops)}"
        self._ops[name] = op
        return operations_pb2.Operation(name=name, done=False)

    # -- Operations --------------------------------------------------------------------------------------

    def _get_operation(self, request: operations_pb2.GetOperationRequest, context: grpc.ServicerContext) -> Any:
        with self._lock:
            op = self._ops.get(request.name)
            if op is None:
                context.abort(grpc.StatusCode.NOT_FOUND, f"operation {request.name} not found")
            op.polls += 1
            if op.error is not None:
                code, message = op.error
                return operations_pb2.Operation(
                    name=request.name, done=True, error=status_pb2.Status(code=code, message=message)
                )
            if op.polls < self.polls_to_ready:
                return operations_pb2.Operation(name=request.name, done=False)
            response = any_pb2.Any()
            if op.kind == "create":
                node = self.nodes[op.node_name]
                if node.state == tpu_v2.Node.State.CREATING:
                    vms = self.vms_per_node or tpu_vm_count(node.accelerator_type)
                    node.network_endpoints = [
                        tpu_v2.NetworkEndpoint(ip_address=self.vm_address, port=8470) for _ in range(vms)
                    ]
                    node.state = tpu_v2.Node.State.READY
                response.Pack(tpu_v2.Node.pb(node))
            else:
                self.nodes.pop(op.node_name, None)
                response.Pack(empty_pb2.Empty())
            return operations_pb2.Operation(name=request.name, done=True, response=response)

    # -- server ------------------------------------------------------------------------------------------

    def _logged(self, method: str, fn: Callable[[Any, grpc.ServicerContext], Any]) -> Callable[..., Any]:
        def handler(request: Any, context: grpc.ServicerContext) -> Any:
            with self._lock:
                self.requests.append((method, request))
                refusal = self.refusals.get(method)
            if refusal is not None:
                context.abort(*refusal)
            return fn(request, context)

        return handler

    def start(self) -> FakeTpu:
        def unary(method: str, fn: Any, request_type: Any, response_serializer: Any) -> grpc.RpcMethodHandler:
            deserialize = request_type.deserialize if hasattr(request_type, "deserialize") else request_type.FromString
            return grpc.unary_unary_rpc_method_handler(
                self._logged(method, fn), request_deserializer=deserialize, response_serializer=response_serializer
            )

        op_out = operations_pb2.Operation.SerializeToString
        tpu = grpc.method_handlers_generic_handler(
            TPU_SERVICE,
            {
                "GetNode": unary("GetNode", self._get_node, tpu_v2.GetNodeRequest, tpu_v2.Node.serialize),
                "ListNodes": unary(
                    "ListNodes", self._list_nodes, tpu_v2.ListNodesRequest, tpu_v2.ListNodesResponse.serialize
                ),
                "CreateNode": unary("CreateNode", self._create_node, tpu_v2.CreateNodeRequest, op_out),
                "DeleteNode": unary("DeleteNode", self._delete_node, tpu_v2.DeleteNodeRequest, op_out),
            },
        )
        ops = grpc.method_handlers_generic_handler(
            OPERATIONS_SERVICE,
            {
                "GetOperation": unary("GetOperation", self._get_operation, operations_pb2.GetOperationRequest, op_out),
            },
        )
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        self._server.add_generic_rpc_handlers((tpu, ops))
        self.port = self._server.add_insecure_port("127.0.0.1:0")
        self._server.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop(grace=None)

    def set_state(self, slice_node_name: str, state: Any) -> None:
        """What the cloud does on its own (e.g. a spot node PREEMPTED)."""
        with self._lock:
            self.nodes[slice_node_name].state = state


class FakeMetadata:
    """A GCE metadata server answering a TPU VM's instance attributes (only with `Metadata-Flavor: Google`).

    It also answers `instance/preempted` (FALSE) and `instance/maintenance-event` (NONE) with an ETag,
    and, as the real one, holds a `?wait_for_change=true&last_etag=E` request until the value's ETag
    is no longer E (or `timeout_sec` passes). `set_instance` changes a value (what the cloud does
    before it takes the VM back) and records when, for tests that time the notice's way to a task.
    """

    def __init__(self, attributes: dict[str, str]) -> None:
        self.attributes = attributes
        self.requests: list[tuple[str, str | None]] = []
        self.instance: dict[str, str] = {"preempted": "FALSE", "maintenance-event": "NONE"}
        self.changed_at: dict[str, float] = {}  # key -> time.time() of its last change
        self._changed = threading.Condition()
        self._closing = False
        fake = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                fake.requests.append((self.path, self.headers.get("Metadata-Flavor")))
                prefix = "/computeMetadata/v1/instance/attributes/"
                path, _, query = self.path.partition("?")
                instance_key = path.removeprefix("/computeMetadata/v1/instance/")
                if self.headers.get("Metadata-Flavor") != "Google":
                    self._answer(403, "Missing required header: Metadata-Flavor")
                elif self.path.startswith(prefix) and self.path[len(prefix) :] in fake.attributes:
                    self._answer(200, fake.attributes[self.path[len(prefix) :]])
                elif path.startswith("/computeMetadata/v1/instance/") and instance_key in fake.instance:
                    value = fake._wait(instance_key, urllib.parse.parse_qs(query))
                    self._answer(200, value, etag=_etag(value))
                else:
                    self._answer(404, "not found")

            def _answer(self, code: int, body: str, etag: str = "") -> None:
                data = body.encode()
                self.send_response(code)
                self.send_header("Metadata-Flavor", "Google")
                if etag:
                    self.send_header("ETag", etag)
                self.send_header("Content-Type", "application/text")
                self.send_header("Content-Length", str(len(data)))
                try:
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):  # a long poll whose agent has gone
                    pass

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        # shutdown() waits for serve_forever's next look at its flag: every 0.5 s by default
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()

    def _wait(self, key: str, query: dict[str, list[str]]) -> str:
        """`key`'s value; with wait_for_change, once its ETag differs from last_etag (or after timeout_sec)."""
        with self._changed:
            if query.get("wait_for_change", [""])[0].lower() == "true":
                last = query.get("last_etag", [""])[0]
                timeout = float(query.get("timeout_sec", ["60"])[0])
                self._changed.wait_for(lambda: self._closing or _etag(self.instance[key]) != last, timeout=timeout)
            return self.instance[key]

    def set_instance(self, key: str, value: str) -> float:
        """Change `instance/<key>` (e.g. `preempted` to `TRUE`); when it changed (time.time())."""
        with self._changed:
            self.instance[key] = value
            self.changed_at[key] = time.time()
            self._changed.notify_all()
            return self.changed_at[key]

    @property
    def host(self) -> str:
        """The value of $GCE_METADATA_HOST that points at this server."""
        return f"127.0.0.1:{self.server.server_address[1]}"

    def stop(self) -> None:
        with self._changed:  # long polls in flight end now
            self._closing = True
            self._changed.notify_all()
        self.server.shutdown()
        self.server.server_close()


def _etag(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()[:16]


def tpu_vm_attributes(node_id: str, accelerator_type: str, topology: str, worker: int, vms: int) -> dict[str, str]:
    """A TPU VM's metadata attributes as the real metadata server lays them out."""
    env = {
        "ACCELERATOR_TYPE": accelerator_type,
        "NODE_ID": node_id,
        "TOPOLOGY": topology,
        "WORKER_ID": str(worker),
        "ZONE": "us-central2-b",
    }
    return {
        "accelerator-type": accelerator_type,
        "agent-worker-number": str(worker),
        "tpu-env": "".join(f"{k}: '{v}'\n" for k, v in env.items()),
        "worker-network-endpoints": ",".join(f"uid{i}:8470:10.0.0.{i + 2}" for i in range(vms)),
    }
