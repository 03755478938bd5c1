"""Names the design skeleton's workflows, its activities and the bench share (pure: passed through)."""

from __future__ import annotations

from datetime import timedelta

from temporalio.common import SearchAttributeKey

SKELETON_JOB = "IrisBenchSkeletonJob"
SKELETON_TASK = "IrisBenchSkeletonTask"
SKELETON_SCHEDULER = "IrisBenchSkeletonScheduler"
SIGNAL_ACTIVITY = "iris_bench_skeleton_signal"
"""Local activity: send `[workflow_id, signal, arg]` triples (enqueues coalesced per receiver)."""
PASS_ACTIVITY = "iris_bench_skeleton_pass"
"""The scheduling pass: takes the queued task ids, returns them placed (no scheduling is done)."""
RUN_ACTIVITY = "iris_bench_skeleton_run"
"""On the agent's queue: run `true`, tell the job it runs, give the place back."""
STATE = SearchAttributeKey.for_keyword("IrisJobState")
"""The search attribute Iris's jobs publish their state to (registered on the local cluster's server)."""
ENQUEUE = "enqueue_batch"
RELEASE = "release_batch"
TIMEOUT = timedelta(seconds=60)
