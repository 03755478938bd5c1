"""`python -m benchmarks`: Iris's latency and throughput next to the bare Temporal dev server it runs on.

One run starts one local cluster (Temporal dev server with the WAL pragmas, the
controller, two worker agents) in a fresh home, measures, and always stops it again
(on success, on error and on Ctrl-C / SIGTERM). Both sides are measured against the
same server, from this process:

- raw (`baseline`): a bare workflow executing one no-op activity, on an in-process worker
  polling a fresh task queue. Latency is "start workflow -> the activity begins" (the
  activity returns its own `time.time()`); throughput is N workflows started at once, all awaited.
- Iris (`iris_jobs`): submit-to-running of a one-task job on an idle cluster, from just before
  `submit_command` to the moment the task's process starts (the command prints
  `date +%s.%N`, read back from the task's log), plus submit-to-SUCCEEDED as the client
  observes it; throughput is N one-task `true` jobs submitted at once, all awaited.

Then it prints (`report`) a table with the targets (Iris submit-to-running median < 0.5 s,
Iris throughput >= 40 % of raw), what each throughput run cost (workflow tasks and history
events per job from `history`, CPU seconds per process from `host`), and (unless
`--no-timeline`) the merged history events of the last latency job, its task and the
scheduler, so the hops can be counted. `figures` holds the summaries both sides share;
`__main__` parses the command line and runs the cluster around the measurements.
"""
