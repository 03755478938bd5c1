"""How large a job may be: checked by the client before it submits (iris.client.submission) and by the job
workflow when it starts.

Numbers only, without the SDK: the client's checks import them, and a refused `iris run` then costs no
Temporal import (~0.3 s of CPU).
"""

from __future__ import annotations

# A task child stays "pending" for Temporal until it ends, and a workflow may have at most 2,000
# pending children: a larger job starts its tasks in waves (job_waves), at most MAX_PENDING_CHILDREN at once.
MAX_PENDING_CHILDREN = 1_000
# A job of more tasks than a wave continues as new (job_handover), so its size is bounded by the store, not
# by one history; what grows with it stays far below the 2 MB payload limit at this size: the handed-over
# table (~0.8 MB compressed at 100,000 rows), and the query answers and result (a summary, job_summary).
MAX_REPLICAS = 100_000
MAX_GANG_REPLICAS = MAX_PENDING_CHILDREN  # a gang is placed as one unit: every member pending at once
