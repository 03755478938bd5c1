"""Ports and peers of distributed tasks, as the scheduler's commit books them (no Temporal needed).

The commit (`Queue.commit`, workflows/scheduler/scheduler_queue.py) is driven directly on a state, as the
scheduler runs it.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from activities.proto import cluster_pb2 as pb
from scheduler.network import COORDINATOR_PORT, PortBook, check_port_names
from workflows.messages import Assigned, SchedulingSpec
from workflows.scheduler.scheduler_carry import pack, unpack
from workflows.scheduler.scheduler_queue import Queue
from workflows.scheduler.scheduler_state import PendingEntry, SchedulerState, WorkerEntry
from workflows.scheduler.scheduler_workflow import SchedulerWorkflow

MIB = 1 << 20


def _worker(
    i: int, address: str, attrs: dict[str, object] | None = None, ports: tuple[int, int] = (20000, 20009)
) -> WorkerEntry:
    return WorkerEntry(f"w{i}", "s", 4000, 1 << 30, 0, 0, attrs or {}, address=address, port_range=ports)


def _slice(hosts: int = 4) -> SchedulerState:
    """A TPU slice whose hosts registered out of host order, each with its own address."""
    order = [2, 0, 3, 1][:hosts]
    workers = {}
    for i in order:
        w = _worker(i, f"10.0.0.{10 + i}", {"tpu-name": "slice-a", "tpu-worker-id": i})
        workers[w.worker_id] = w
    return SchedulerState(workers=workers)


def _scheduler(state: SchedulerState) -> Queue:
    """The scheduler's queue and commit on `state`, outside a workflow (its clock fixed)."""
    scheduler = SchedulerWorkflow()
    scheduler.state = state
    scheduler.core.clock = lambda: 1_000.0
    return scheduler.queue


def _enqueue(state: SchedulerState, job: str, tasks: int, *, ports: list[str] | None = None,
             group_by: str = "", attempt: int = 0, indexes: list[int] | None = None) -> None:  # fmt: skip
    spec = SchedulingSpec(cpu_millis=100, memory_bytes=MIB, group_by=group_by, ports=ports or [],
                          coordinator=tasks > 1)  # fmt: skip
    chosen = range(tasks) if indexes is None else indexes
    state.pending[job] = PendingEntry(job, spec, dict.fromkeys(chosen, attempt), 1.0)


def _plan(job: str, placed: dict[int, str]) -> pb.SchedulingPlan:
    plan = pb.SchedulingPlan()
    for index, worker in placed.items():
        plan.assignments.add(job_id=job, task_index=index, worker_id=worker)
    return plan


def _networks(accepted: list[tuple[str, Assigned, pb.SchedulingAssignment]]) -> dict[int, Assigned]:
    return {a.task_index: assigned for _, assigned, a in accepted}


def test_gang_on_a_tpu_slice_learns_its_coordinator_and_hosts_in_host_order() -> None:
    """Task i on host i: each learns task 0's address and port, its slice's hosts by tpu-worker-id, its index."""
    state = _slice()
    _enqueue(state, "j", 4, ports=["http"], group_by="tpu-name")
    got = _networks(_scheduler(state).commit(_plan("j", {i: f"w{i}" for i in range(4)}), now=0.0))
    nets = {i: got[i].network for i in range(4)}
    assert all(n is not None for n in nets.values())
    zero = nets[0]
    assert zero is not None
    coordinator = f"10.0.0.10:{zero.ports[COORDINATOR_PORT]}"
    hosts = ["10.0.0.10", "10.0.0.11", "10.0.0.12", "10.0.0.13"]
    for i, net in nets.items():
        assert net is not None
        assert coordinator == net.coordinator
        assert hosts == net.slice_hosts
        assert i == net.slice_host_index
        assert f"10.0.0.{10 + i}" == net.address
        assert {"http"} | ({COORDINATOR_PORT} if i == 0 else set()) == set(net.ports)


def test_slice_hosts_follow_tpu_worker_id_not_task_order() -> None:
    """A task placed on host 3 is told it is host 3 of the slice, whatever its own task index."""
    state = _slice()
    _enqueue(state, "j", 4, group_by="tpu-name")
    got = _networks(_scheduler(state).commit(_plan("j", {0: "w3", 1: "w2", 2: "w1", 3: "w0"}), now=0.0))
    net = got[0].network
    assert net is not None
    assert (3, "10.0.0.13") == (net.slice_host_index, net.slice_hosts[3])
    assert net.coordinator.startswith("10.0.0.13:")


def test_retried_gang_gets_a_fresh_coordinator_port() -> None:
    """After the gang's places are given back, its next attempt's coordinator is on another port."""
    state = _slice()
    _enqueue(state, "j", 4, group_by="tpu-name")
    scheduler = _scheduler(state)
    first = _networks(scheduler.commit(_plan("j", {i: f"w{i}" for i in range(4)}), now=0.0))[0].network
    for i in range(4):
        scheduler.release_place("j", i, 0)
    _enqueue(state, "j", 4, group_by="tpu-name", attempt=1)
    second = _networks(scheduler.commit(_plan("j", {i: f"w{i}" for i in range(4)}), now=0.0))[0].network
    assert first is not None and second is not None
    assert first.coordinator != second.coordinator


def test_plain_job_task_placed_before_task_0_has_no_coordinator_and_later_ones_do() -> None:
    """Without coscheduling tasks are placed as they fit: the coordinator is task 0's once it is placed."""
    state = SchedulerState(workers={"w0": _worker(0, "h0"), "w1": _worker(1, "h1")})
    scheduler = _scheduler(state)
    _enqueue(state, "j", 3)
    early = _networks(scheduler.commit(_plan("j", {1: "w1"}), now=0.0))[1].network
    late = _networks(scheduler.commit(_plan("j", {0: "w0", 2: "w1"}), now=0.0))
    assert early is not None and "" == early.coordinator
    zero = late[0].network
    assert zero is not None
    assert f"h0:{zero.ports[COORDINATOR_PORT]}" == zero.coordinator
    two = late[2].network
    assert two is not None and zero.coordinator == two.coordinator


def test_single_task_without_ports_gets_no_network() -> None:
    """A plain one-task job costs nothing extra: no ports booked, nothing added to its assignment."""
    state = SchedulerState(workers={"w0": _worker(0, "h0")})
    _enqueue(state, "j", 1)
    (_, assigned, _), = _scheduler(state).commit(_plan("j", {0: "w0"}), now=0.0)
    assert assigned.network is None
    assert {} == state.placements["j/task-0"].ports


def test_gang_waits_whole_when_a_host_has_no_port_left() -> None:
    """A host whose port range is used up takes no member of a gang, and no member is placed."""
    state = _slice(2)
    state.workers["w0"].port_range = (20000, 20000)
    _enqueue(state, "j", 2, ports=["http"], group_by="tpu-name")
    assert [] == _scheduler(state).commit(_plan("j", {0: "w0", 1: "w1"}), now=0.0)
    assert {} == state.placements
    assert {0: 0, 1: 0} == state.pending["j"].attempts


def test_ports_survive_continue_as_new() -> None:
    """The packed state keeps each placement's ports and each host's cursor."""
    state = _slice()
    _enqueue(state, "j", 4, ports=["http"], group_by="tpu-name")
    _scheduler(state).commit(_plan("j", {i: f"w{i}" for i in range(4)}), now=0.0)
    again = unpack(pack(state))
    assert {k: p.ports for k, p in state.placements.items()} == {k: p.ports for k, p in again.placements.items()}
    assert state.port_cursors == again.port_cursors
    assert ("10.0.0.12", (20000, 20009)) == (again.workers["w2"].address, again.workers["w2"].port_range)


def test_port_names_are_checked() -> None:
    """Names that cannot be a variable, or twice the same variable, are refused naming the field."""
    assert "" == check_port_names(["http", "actor_2"])
    assert check_port_names(["jax-coordinator"]).startswith("ports: 'jax-coordinator'")
    assert "twice" in check_port_names(["http", "HTTP"])
    assert check_port_names(["1st"]).startswith("ports:")


def test_port_book_wraps_and_skips_held_ports() -> None:
    """Ports are handed out after the last one given, wrapping at the range's end, never one still held."""
    book = PortBook({"h": {101}}, {"h": 100})
    assert [102, 100] == [book.take("h", 100, 102), book.take("h", 100, 102)]
    assert book.take("h", 100, 102) is None


# -- property: no port is ever held by two live tasks on one host ----------------------------------

ADDRESSES = ("h0", "h0", "h1", "h1", "h2")  # workers 0 and 1 share a host, so do 2 and 3
op = st.one_of(
    st.tuples(
        st.just("place"), st.integers(1, 4), st.integers(0, 2), st.booleans(),
        st.lists(st.integers(0, len(ADDRESSES) - 1), min_size=4, max_size=4),
    ),
    st.tuples(st.just("release"), st.integers(0, 50)),
)


@settings(max_examples=150, deadline=None)
@given(st.lists(op, max_size=40))
def test_no_port_is_held_by_two_live_tasks_on_one_host(ops: list[tuple[object, ...]]) -> None:
    """Whatever is placed and released, live placements on one host never share a port, all in range."""
    workers = {f"w{i}": _worker(i, a, ports=(30000, 30011)) for i, a in enumerate(ADDRESSES)}
    state = SchedulerState(workers=workers)
    scheduler = _scheduler(state)
    jobs = 0
    for step in ops:
        if step[0] == "place":
            _, tasks, names, gang, where = step
            assert isinstance(tasks, int) and isinstance(names, int) and isinstance(where, list)
            job = f"j{jobs}"
            jobs += 1
            _enqueue(state, job, tasks, ports=["a", "b"][:names], group_by="g" if gang else "")
            scheduler.commit(_plan(job, {i: f"w{where[i]}" for i in range(tasks)}), now=0.0)
            state.pending.pop(job, None)
        elif state.placements:
            _, pick = step
            assert isinstance(pick, int)
            p = list(state.placements.values())[pick % len(state.placements)]
            scheduler.release_place(p.job_id, p.task_index, p.attempt)
        held: set[tuple[str, int]] = set()
        for p in state.placements.values():
            worker = state.workers[p.worker_id]
            for port in p.ports.values():
                assert worker.port_range[0] <= port <= worker.port_range[1]
                assert (worker.address, port) not in held
                held.add((worker.address, port))


def test_a_huge_gangs_assignments_are_announced_in_batches_below_the_payload_limit() -> None:
    """A 1,000-host slice: each batch of assignments carries at most MAX_ANNOUNCED_HOSTS host names."""
    import json

    from activities.contracts import Delivery
    from workflows.scheduler.scheduler_network import MAX_ANNOUNCED_HOSTS, announce_batches

    hosts = 1_000
    workers = {}
    for i in range(hosts):
        w = _worker(i, f"10.1.{i // 250}.{i % 250}", {"tpu-name": "big", "tpu-worker-id": i})
        workers[w.worker_id] = w
    state = SchedulerState(workers=workers)
    _enqueue(state, "j", hosts, group_by="tpu-name")
    accepted = _scheduler(state).commit(_plan("j", {i: f"w{i}" for i in range(hosts)}), now=0.0)
    outgoing = [(Delivery(key, "assigned", assigned), placed) for key, assigned, placed in accepted]
    batches = list(announce_batches(outgoing, 2_000))
    assert hosts == sum(len(b) for b in batches)
    for batch in batches:
        names = sum(len(d.arg.network.slice_hosts) for d, _ in batch)
        assert names <= MAX_ANNOUNCED_HOSTS
        size = len(json.dumps([{"network": {"slice_hosts": d.arg.network.slice_hosts}} for d, _ in batch]))
        assert size < 512 * 1024  # Temporal warns past 512 KB and refuses past 2 MB


def test_task_environment_from_its_network() -> None:
    """The agent's variables: JAX's three for a multi-task job, TPU hosts on a slice, one IRIS_PORT_ per name."""
    from activities.contracts import RunTaskInput, TaskNetwork
    from worker_agent.distributed_env import distributed_env, endpoints

    net = TaskNetwork(address="10.0.0.11", ports={"http": 20001}, coordinator="10.0.0.10:20000",
                      slice_hosts=["10.0.0.10", "10.0.0.11"], slice_host_index=1)  # fmt: skip
    inp = RunTaskInput(job_id="j", task_index=1, num_tasks=2, attempt=0, worker_id="w1", network=net)
    assert {
        "JAX_COORDINATOR_ADDRESS": "10.0.0.10:20000", "JAX_NUM_PROCESSES": "2", "JAX_PROCESS_ID": "1",
        "TPU_WORKER_HOSTNAMES": "10.0.0.10,10.0.0.11", "TPU_WORKER_ID": "1", "IRIS_PORT_HTTP": "20001",
    } == distributed_env(inp)  # fmt: skip
    assert {"http": "10.0.0.11:20001"} == endpoints(net)
    zero = TaskNetwork(address="10.0.0.10", ports={COORDINATOR_PORT: 20000})
    assert {"JAX_NUM_PROCESSES": "2", "JAX_PROCESS_ID": "0"} == distributed_env(
        RunTaskInput(job_id="j", task_index=0, num_tasks=2, attempt=0, worker_id="w0", network=zero)
    )
    assert {} == distributed_env(RunTaskInput(job_id="j", task_index=0, num_tasks=1, attempt=0, worker_id="w0"))


def test_a_worker_with_a_bad_port_range_is_refused() -> None:
    """Registration names the port range when it is outside 1-65535 or backwards."""
    from activities.contracts.worker_rows import validate_metadata

    meta = pb.WorkerMetadata(worker_id="w", port_range_start=30000, port_range_end=20000)
    meta.capacity.cpu_millis = 1000
    assert validate_metadata(meta).startswith("port range 30000-20000")
    meta.port_range_end = 40000
    assert "" == validate_metadata(meta)


def test_multi_slice_gang_gets_a_megascale_port_on_slice_0s_first_host() -> None:
    """Two 2-host slices: every task is told the same MegaScale coordinator, task 0's host on its own port."""
    from activities.contracts import RunTaskInput
    from scheduler.network import MEGASCALE_PORT
    from worker_agent.distributed_env import distributed_env

    workers = {}
    for i in range(4):
        w = _worker(i, f"10.0.{i // 2}.{i % 2}", {"tpu-name": f"s{i // 2}", "tpu-worker-id": i % 2})
        workers[w.worker_id] = w
    state = SchedulerState(workers=workers)
    _enqueue(state, "j", 4, group_by="tpu-name")
    state.pending["j"].spec.num_groups = 2
    got = _networks(_scheduler(state).commit(_plan("j", {i: f"w{i}" for i in range(4)}), now=0.0))
    zero = got[0].network
    assert zero is not None
    megascale = f"10.0.0.0:{zero.ports[MEGASCALE_PORT]}"
    assert megascale != zero.coordinator
    for i in range(4):
        net = got[i].network
        assert net is not None
        assert megascale == net.megascale_coordinator
        assert [f"10.0.{i // 2}.0", f"10.0.{i // 2}.1"] == net.slice_hosts  # its own slice's hosts only
        env = distributed_env(RunTaskInput("j", i, 4, 0, f"w{i}", num_slices=2, network=net))
        assert (megascale, str(i // 2), "2") == (
            env["MEGASCALE_COORDINATOR_ADDRESS"], env["MEGASCALE_SLICE_ID"], env["MEGASCALE_NUM_SLICES"]
        )
