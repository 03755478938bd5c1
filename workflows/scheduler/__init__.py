"""The scheduler workflow: one singleton run that keeps the fleet and the queue, and asks the pure
scheduler (the top-level `scheduler` package, run in an activity) where queued tasks go.

`scheduler_workflow` is the shell; `scheduler_core` what its parts share; the parts are the
`scheduler_*` modules, and the state they keep is `scheduler_state` with its indexes.
"""
