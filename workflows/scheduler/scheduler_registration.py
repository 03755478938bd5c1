"""The scheduler workflow's worker registry: registration, liveness, cordons and quarantine.

Every change to a worker's state goes through the table in worker_lifecycle (`Registry.worker_event`).

Registration is a signal carrying a batch of hosts (`register_workers`), sent by each agent's
WorkerWorkflow and answered with a `registered` signal, so 10,000 agents do not queue updates on
the one scheduler. There is no update at all: an update's acceptance is ordered among the commands of
its task, and a controller that answered a query on a run it did not hold (docs/reliability.md,
"Replays") ordered it differently from the run's history, failing its next task.

A lost worker stays listed as unhealthy for LOST_RETENTION, then leaves; a worker that does not pick up
its work is kept from new work for a while (quarantine).
"""

from __future__ import annotations

from datetime import timedelta
from operator import attrgetter
from typing import TYPE_CHECKING

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from activities.contracts import EVICT, REGISTERED, Delivery, task_workflow_id
    from activities.contracts.worker_rows import batch_of_rows, registration_refused
    from activities.proto import cluster_pb2 as pb
    from activities.proto.values import set_attr
    from workflows.fleet.worker_lifecycle import WorkerEffect, WorkerEvent, WorkerState, transition
    from workflows.lifecycle import Step
    from workflows.messages import (
        CordonWorkers,
        Evict,
        RegistrationReply,
        RemoveWorkers,
        WorkerLost,
    )
    from workflows.scheduler.scheduler_actions import record
    from workflows.scheduler.scheduler_core import SchedulerCore, held_in_turn
    from workflows.scheduler.scheduler_state import WorkerEntry, refusal

WORKERS_PAGE_BYTES = 256 * 1024  # a page of the `workers` query: far below the 2 MB an answer may take

QUARANTINE = timedelta(seconds=30)
QUARANTINE_MAX = timedelta(minutes=10)
QUARANTINE_DOUBLINGS = 5  # 30 s * 2**5 > 10 min: more doublings change nothing (and 2**n must not overflow)
LOST_RETENTION = timedelta(minutes=5)  # a lost worker is listed as unhealthy this long, then removed
PURGE_INTERVAL = timedelta(minutes=1)
LOST_NAMED = 5  # a session's lost hosts named in its log line (the rest counted)
_ROW = attrgetter("row")
_ROW_STATE = attrgetter("row.state")

if TYPE_CHECKING:
    from workflows.scheduler.placement_index import Placement
    from workflows.scheduler.scheduler_reservations import Reserving
    from workflows.scheduler.scheduler_sharing import Sharing


class Registry:
    """The scheduler's workers (a part of SchedulerWorkflow: scheduler_core says how the parts meet)."""

    def __init__(self, core: SchedulerCore, sharing: Sharing, reserving: Reserving) -> None:
        self.core = core
        self._sharing = sharing  # charges the places of removed workers
        self._reserving = reserving  # moves reservations off lost workers
        self._last_purge = 0.0

    @held_in_turn
    def worker_lost(self, lost: WorkerLost) -> None:
        """A liveness session ended: its hosts are lost, but for those registered since by another session."""
        workers, stamped, now = self.core.state.workers, [], self.core.now()
        for worker_id in [lost.worker_id, *lost.more_worker_ids]:
            worker = workers.get(worker_id)
            if worker is None or worker.session != lost.session:
                continue
            if WorkerEffect.STAMP_LOST in self.worker_event(worker, WorkerEvent.LOST, now=now).effects:
                stamped.append(worker_id)
        if stamped:  # once for the session: a line per host was most of a 100-host agent's loss
            self._reserving.reservations_lost(set(stamped))
            more = f" and {len(stamped) - LOST_NAMED} more" if len(stamped) > LOST_NAMED else ""
            workflow.logger.warning("%d workers lost (%s%s): %s", len(stamped), ", ".join(stamped[:LOST_NAMED]),
                                    more, lost.reason)  # fmt: skip

    @held_in_turn
    def cordon_workers(self, request: CordonWorkers) -> None:
        """No new work on these workers (or again, with cordoned=False); their running tasks go on."""
        if request.only_if_idle and request.cordoned:
            asked = set(request.worker_ids)
            busy = sum(map(self.core.state.placements.count_on, asked))
            if busy:
                workflow.logger.info("not cordoned (%d tasks placed there): %s", busy, request.reason)
                return
        changed = [
            w
            for worker_id in request.worker_ids
            if (w := self.core.state.workers.get(worker_id)) is not None and w.cordoned != request.cordoned
        ]
        now = self.core.now()
        for worker in changed:
            worker.cordoned = request.cordoned
            what = "worker cordoned" if request.cordoned else "worker uncordoned"
            record(self.core.state.actions, now, what, "worker", worker.worker_id, request.reason)
        if changed:
            self.core.changed()
            workflow.logger.info(
                "%s %d workers: %s", "cordoned" if request.cordoned else "uncordoned", len(changed), request.reason
            )

    @held_in_turn
    def remove_workers(self, request: RemoveWorkers) -> None:
        """These workers are gone for good: forget them and the capacity their tasks held.

        Their tasks notice on their own (the attempt stops heartbeating) and are retried elsewhere.
        """
        gone = [worker_id for worker_id in request.worker_ids if worker_id in self.core.state.workers]
        if gone:
            self._tell_lost_tasks(gone, request.reason)
            self.forget(gone)
            workflow.logger.info("removed %d workers: %s", len(gone), request.reason)

    @held_in_turn
    def register_workers(self, batch: pb.WorkerBatch) -> None:
        """Add or refresh one agent's hosts; `reply_to` hears which were refused and why.

        The agent sends its hosts as rows it checked (activities/contracts/worker_rows.py), read here as they
        are: ~1 us a host, so a fleet's burst is admitted in the workflow task it comes in (30,000 hosts in
        ~40 ms). Hosts sent as metadata (`workers`) are checked and copied here.
        """
        declared, refused = batch_of_rows(list(batch.workers), batch.reply_to)  # metadata: checked here
        for worker_id, reason in refused.items():
            workflow.logger.warning("worker %s %s", worker_id, reason)
        for row in [*declared.rows, *batch.rows]:
            self._admit(row, refused)
        self.core.changed()
        if batch.reply_to:
            self.core.replies.append(Delivery(batch.reply_to, REGISTERED, RegistrationReply(refused)))

    def _admit(self, row: pb.WorkerRow, refused: dict[str, str]) -> None:
        """Add or refresh a worker (an operator's cordon outlives the agent's restart), unless refused."""
        state = self.core.state
        before = state.workers.get(row.worker_id)
        if before is None:
            row.state = WorkerState.READY  # the lifecycle is the scheduler's (an agent's row leaves it unset)
            state.workers[row.worker_id] = WorkerEntry.of(row)
            return
        reason = refusal(state, row)
        if reason:
            refused[row.worker_id] = registration_refused(reason)
            workflow.logger.warning("worker %s refused: %s", row.worker_id, reason)
        else:
            self.worker_event(before, WorkerEvent.REGISTERED, row=row)

    def worker_event(
        self, worker: WorkerEntry, event: WorkerEvent, *, row: pb.WorkerRow | None = None, now: float | None = None
    ) -> Step[WorkerState, WorkerEffect]:
        """Take `event` through the worker lifecycle table (InvalidTransition, failing the workflow task,
        if it cannot happen now) and perform the effects it lists; the step taken. A loss's reservations and
        log line are the caller's (`worker_lost`), once for all of a session's hosts.

        The clock is read only where it matters, or given (`now`): reading it is ~4 us through the SDK, which a
        burst of re-registrations (10,000 agents after a controller restart) or of losses paid for every host."""
        state = worker.state
        if state == WorkerState.QUARANTINED and worker.suspect_until <= (self.core.now() if now is None else now):
            state = transition(state, WorkerEvent.QUARANTINE_ENDED).next  # its time passed
        step = transition(state, event)
        worker.state = step.next
        for effect in step.effects:
            if effect is WorkerEffect.RESET:
                assert row is not None, "a registration brings the worker's row"
                row.state, row.cordoned = WorkerState.READY, worker.cordoned
                self.core.state.workers[worker.worker_id] = WorkerEntry.of(row)
            elif effect is WorkerEffect.QUARANTINE:
                worker.dispatch_failures += 1
                doublings = min(worker.dispatch_failures - 1, QUARANTINE_DOUBLINGS)
                quarantine = min(QUARANTINE_MAX, QUARANTINE * 2**doublings)
                worker.suspect_until = self.core.now() + quarantine.total_seconds()
                self.core.snapshot = None
                workflow.logger.warning("worker %s did not pick up work; no new work for %s", worker.worker_id,
                                        quarantine)  # fmt: skip
            elif effect is WorkerEffect.FORGIVE:
                worker.dispatch_failures = 0  # it ran a task, so it polls: the next failure starts a new count
            elif effect is WorkerEffect.STAMP_LOST:
                worker.lost_at = self.core.now() if now is None else now
                self.core.snapshot = None
        return step

    def _tell_lost_tasks(self, worker_ids: list[str], reason: str) -> None:
        """The attempts placed on removed workers are stopped now, as preemptions whose error names the cause
        (e.g. the slice the cloud took back), rather than only when their heartbeats time out."""
        for p in self.core.state.placements.on_workers(worker_ids):
            evict = Evict(p.attempt, f"its host is gone ({reason})", grace_seconds=0.0)
            self.core.replies.append(Delivery(task_workflow_id(p.job_id, p.task_index), EVICT, evict))

    def forget(self, worker_ids: list[str]) -> None:
        gone = set(worker_ids)
        placements = self.core.state.placements
        for p in placements.on_workers(gone):
            # its place is gone with the worker: charged now (while the worker's capacity kind is known)
            self._sharing.charge_release(placements.pop(task_workflow_id(p.job_id, p.task_index)))
        for worker_id in gone:
            self.core.state.workers.pop(worker_id, None)
        self._reserving.reservations_lost(gone)
        self.core.changed()

    def purge_lost(self, force: bool = False) -> None:
        """Remove workers lost more than LOST_RETENTION ago (checked at most once per PURGE_INTERVAL)."""
        now = self.core.now()
        if not force and now - self._last_purge < PURGE_INTERVAL.total_seconds():
            return
        self._last_purge = now
        cutoff = now - LOST_RETENTION.total_seconds()
        lost = WorkerState.LOST
        # Read from the rows in C (every run's first wake does this: 15-30 ms at 30,000 workers through properties)
        rows = map(_ROW, self.core.state.workers.values())
        gone = [row.worker_id for row in rows if row.state == lost and 0 < row.lost_at < cutoff]
        if gone:
            self.forget(gone)
            workflow.logger.info("removed %d workers lost more than %s ago", len(gone), LOST_RETENTION)

    def healthy_worker_count(self) -> int:
        if self.core.handed_over is not None:  # this run continued as new: as it handed the state over
            return self.core.handed_over.healthy_workers
        lost = WorkerState.LOST
        return sum(state != lost for state in map(_ROW_STATE, self.core.state.workers.values()))

    def workers(self, after: str = "") -> pb.WorkerList:
        """One page of the workers, in id order from after `after`, with what is placed there (refused while the
        run loads its carried state: SchedulerCore.whole). A page stops at WORKERS_PAGE_BYTES, `next_after` naming
        where the next starts: every worker at once was past the 2 MB a query's answer may take at 10,000
        workers, and a query answered with a workflow task carried it into that task's completion, which the
        server then refused by terminating the scheduler (GrpcMessageTooLarge)."""
        state = self.core.whole()
        tasks: dict[str, list[tuple[str, Placement]]] = {}
        for p in state.placements.on_workers(w for w in state.placements.used if w > after):
            tasks.setdefault(p.worker_id, []).append((task_workflow_id(p.job_id, p.task_index), p))
        out = pb.WorkerList()
        size = 0
        for worker_id in sorted(w for w in state.workers if w > after):
            if size > WORKERS_PAGE_BYTES:
                out.next_after = out.workers[-1].worker_id
                break
            w = state.workers[worker_id]
            status = out.workers.add(worker_id=w.worker_id, healthy=w.healthy, cordoned=w.cordoned)
            status.capacity.cpu_millis = w.cpu_millis
            status.capacity.memory_bytes = w.memory_bytes
            status.capacity.gpus = w.gpus
            status.capacity.tpus = w.tpus
            for key, value in w.attributes.items():
                set_attr(status.attributes[key], value)
            for key, p in tasks.get(worker_id, ()):
                status.running_tasks.append(key)
                status.committed.cpu_millis += p.cpu_millis
                status.committed.memory_bytes += p.memory_bytes
                status.committed.gpus += p.gpus
                status.committed.tpus += p.tpus
            size += status.ByteSize()
        return out
