"""`python -m tests.dashboard.screenshots DIR`: the pictures of each dashboard page in docs/operators.md.

Starts a local cluster (plain workers, a fake TPU slice and a local scale group), gives it jobs in
every state, and saves each page as DIR/dashboard-<page>.png from the same headless chromium the
tests drive.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

from iris import Constraint, CoschedulingConfig, IrisClient, ResourceSpec
from iris.config.cluster_file import parse_config
from iris.local.cluster import LocalCluster
from tests.conftest import TEST_FLEET
from tests.dashboard.browser import chromium, console_errors

FLEET = {
    **TEST_FLEET,
    "scale_groups": [{
        "name": "cpu-pool", "platform": "local", "hosts_per_slice": 2, "min_slices": 1, "max_slices": 2,
        "resources": {"cpu": 1, "memory": "1g"}, "attributes": {"pool": "scaled"},
    }],
}  # fmt: skip


def wait(check: object, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise TimeoutError("the screenshot scene did not settle")
        time.sleep(0.5)


def main(out: Path) -> int:
    out.mkdir(parents=True, exist_ok=True)
    home = Path(tempfile.mkdtemp(prefix="iris-screens-"))
    local = LocalCluster(home)
    info = local.up(parse_config(FLEET, "screenshot fleet"))
    try:
        with IrisClient.connect(info.address, store=info.store_url) as client:
            wait(lambda: any(s.state == "READY" for s in client.list_slices()))
            client.submit_command(["python", "-c", "print('rows: 1200'); print('done')"], name="etl",
                                  resources=ResourceSpec(cpu=0.5, memory="256m", replicas=2)).wait(timeout=120)
            flaky = client.submit_command(["python", "-c", "import sys; print('loading shard 3'); sys.exit(3)"],
                                          name="flaky-eval", resources=ResourceSpec(cpu=0.5, memory="256m"))
            flaky.wait(timeout=120, raise_on_failure=False)
            train = client.submit_command(
                ["python", "-c", "import time\nfor step in range(600):\n print(f'step {step} loss 0.42', flush=True)"
                 "\n time.sleep(1)"],
                name="train", resources=ResourceSpec(cpu=1, memory="512m", replicas=4),
                constraints=[Constraint("tpu-topology", "EQ", "v5e-16")],
                coscheduling=CoschedulingConfig(group_by="tpu-name"),
            )  # fmt: skip
            wait(lambda: train.status().task_state_counts.get("RUNNING") == 4)
            big = ResourceSpec(cpu=64, memory="1g")
            client.submit_command(["python", "-c", "pass"], name="big-sweep", resources=big)
            client.submit_command(["python", "-c", "pass"], name="v5e-64-finetune",
                                  resources=ResourceSpec(cpu=1, memory="1g"),
                                  constraints=[Constraint("tpu-topology", "EQ", "v5e-64")])  # fmt: skip
            time.sleep(20)  # a few queue-depth samples for the picture
            busy = train.status().tasks[0].worker_id
            pages = {
                "actions": "/actions", "queue": "/queue", "jobs": "/jobs", "job": f"/jobs/{flaky.job_id}",
                "users": "/users", "reservations": "/reservations", "workers": "/workers",
                "worker": f"/workers/{busy}", "fleet": "/fleet",
            }  # fmt: skip
            with chromium() as driver:
                for name, path in pages.items():
                    driver.set_window_size(1400, 900)
                    driver.get(info.dashboard_url + path)
                    time.sleep(1.0)
                    height = driver.execute_script("return document.documentElement.scrollHeight")
                    driver.set_window_size(1400, min(max(700, height + 20), 2000))
                    time.sleep(0.3)
                    driver.save_screenshot(str(out / f"dashboard-{name}.png"))
                    errors = console_errors(driver)
                    print(f"{name}: {path}" + (f" console errors: {errors}" if errors else ""))
            train.terminate()
    finally:
        local.down()
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1] if len(sys.argv) > 1 else "docs")))
