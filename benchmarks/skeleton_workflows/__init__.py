"""The bench's design skeleton (`python -m benchmarks`): an Iris job's shape with none of Iris's logic.

Each piece is one the design prescribes, reduced to its Temporal traffic: a job workflow
that starts one child per task and hands it to a singleton scheduler by a (coalesced)
signal sent from a local activity; a scheduler that runs each pass as a regular activity
and tells the placed tasks by a local activity's signals; a task workflow that waits for
its assignment and runs its attempt as an activity on the agent's own task queue; an agent
(another process) that starts the task's process, heartbeats once, tells the job the task
runs and gives the place back by (coalesced) signal; and the job's state published to its
search attribute and memo when it changes. Every workflow runs in the SDK's sandbox.

What is left out is Iris: validation, the scheduling function and its data, the state
tables, task areas, logs, blobs, retries, continue-as-new. The skeleton's rate is the
ceiling of the design on this server; Iris's rate against it is what Iris's own code costs.
Not Iris workflows (`workflows.registry` does not list them). One module per workflow, as
Iris has: a sandbox re-imports a run's workflow module, and each workflow class in it costs
the decorator's inspection again (a module of three cost each run 2-3 ms more). The names they
share are in `names`, passed through.
"""
