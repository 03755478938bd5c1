"""`python -m scheduler.bench INPUT.json OUTPUT.json` (shared/spec/scheduler-bench.md)."""

from scheduler.bench import main

raise SystemExit(main())
