"""The dashboard of a real local cluster, in a real headless chromium: a job's way from queue to finish."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from iris import Constraint, IrisClient, ResourceSpec
from tests.dashboard.browser import chromium, console_errors, missing
from tests.support import Cluster, missing_engine

pytestmark = pytest.mark.e2e

PAGES = ("actions", "queue", "jobs", "schedules", "users", "reservations", "workers", "fleet")
CPU_WORKERS = [Constraint("pool", "EQ", "cpu")]  # the session fleet's two 2-cpu workers


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    reason = missing()
    if reason:
        missing_engine(reason)
    with chromium() as driver:
        yield driver


def text_of(driver: Any, selector: str) -> str:
    """The element's text now, or "" (read in one script call: the live refresh may swap it any moment)."""
    found = driver.execute_script("const e = document.querySelector(arguments[0]); return e ? e.innerText : '';",
                                  selector)  # fmt: skip
    return str(found or "")


def eventually(check: Callable[[], Any], timeout: float = 60.0, what: str = "") -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout} s: {what}")
        time.sleep(0.3)


def depth_since(driver: Any) -> str:
    """When the queue-depth picture's first sample was taken, as the page says ("" without a picture)."""
    found = driver.execute_script("const e = document.querySelector('svg[data-since]');"
                                  "return e ? e.getAttribute('data-since') : '';")  # fmt: skip
    return str(found or "")


def open_page(driver: Any, url: str) -> None:
    """Load `url` and require that it logged no console error (script errors, failed loads)."""
    console_errors(driver)  # drop what earlier pages logged
    driver.get(url)
    eventually(lambda: driver.execute_script("return document.readyState") == "complete", 30, f"{url} loads")
    assert [] == console_errors(driver), url


def test_a_job_from_queue_to_finish(cluster: Cluster, client: IrisClient, browser: Any, tmp_path: Path) -> None:
    """A queued job shows its reason, the blocking task shows on its worker, then the job finishes and links out."""
    dashboard = cluster.info.dashboard_url
    assert dashboard.startswith("http://127.0.0.1:")
    go = tmp_path / "go"
    blocker = client.submit_command(
        [sys.executable, "-c", f"import os, time\nwhile not os.path.exists({str(go)!r}): time.sleep(0.1)"],
        name="dash-blocker", resources=ResourceSpec(cpu=2, memory="256m", replicas=2), constraints=CPU_WORKERS,
    )  # fmt: skip
    queued = None
    try:
        eventually(lambda: blocker.status().task_state_counts.get("RUNNING") == 2, 60, "the blocker runs")
        open_page(browser, f"{dashboard}/queue")
        queued = client.submit_command(
            [sys.executable, "-c", "print('dashboard says hi')"],
            name="dash-queued", resources=ResourceSpec(cpu=2, memory="256m"), constraints=CPU_WORKERS,
        )  # fmt: skip
        row = f'#queue tr[data-job="{queued.job_id}"]'
        # no reload: the page's live refresh brings the row, then the scheduler's reason for it
        reason = eventually(lambda: "free cpu" in text_of(browser, f"{row} .reason") and text_of(browser, row),
                            60, "the queued job and its pending reason on the queue page")  # fmt: skip
        assert "dash-queued" in reason

        busy_worker = blocker.status().tasks[0].worker_id
        open_page(browser, f"{dashboard}/workers?state=busy")
        assert busy_worker in text_of(browser, "#workers")
        open_page(browser, f"{dashboard}/workers/{busy_worker}")
        assert f"{blocker.job_id}/task-" in text_of(browser, "#running")
        assert blocker.job_id in text_of(browser, "#recent")  # its placement names the job (it said "task 0")

        open_page(browser, f"{dashboard}/jobs")
        job_row = f'#jobs tr[data-job="{queued.job_id}"]'
        assert "PENDING" in text_of(browser, job_row)
        go.touch()
        eventually(lambda: "SUCCEEDED" in text_of(browser, job_row), 90, "the job shown as succeeded on the jobs page")

        link = browser.execute_script(f"return document.querySelector('{job_row} td a').href;")
        open_page(browser, link)
        assert "SUCCEEDED" in text_of(browser, "#tasks")
        assert "dashboard says hi" in text_of(browser, "pre.logs")
        temporal = browser.execute_script("return document.querySelector('dl.facts a.wf').href;")
        assert f"{cluster.info.ui_url}/namespaces/default/workflows/{queued.job_id}" == temporal
        browser.get(temporal)  # the Temporal UI's page of the job's workflow (its console is not ours to judge)
        eventually(lambda: "JobWorkflow" in text_of(browser, "body"), 60, "the Temporal UI shows the job's workflow")

        def actions() -> str:
            open_page(browser, f"{dashboard}/actions?job={queued.job_id}")
            return text_of(browser, "#actions")

        # The scheduler's record is cached like its other state: a refresh or two may pass before it shows.
        shown = eventually(lambda: "tasks placed" in actions() and text_of(browser, "#actions"), 30,
                           "the placement in the actions log")  # fmt: skip
        assert "job submitted" in shown and "job succeeded" in shown
        assert "task 0 on " in shown  # which worker the scheduler placed it on
    finally:
        go.touch()
        for job in (blocker, queued):
            if job is not None:
                job.terminate()


def test_the_queue_lists_two_users_in_the_schedulers_fair_share_order(cluster: Cluster, browser: Any,
                                                                       tmp_path: Path) -> None:  # fmt: skip
    """ivy already runs a task (an hour of it counts toward her share), jo runs nothing: jo's job, submitted
    last, is listed before ivy's two, as the scheduler's pass would try them; ivy's keep their own order."""
    info = cluster.info
    go = tmp_path / "go"
    nowhere = [Constraint("pool", "EQ", "nowhere")]  # no worker has it: the jobs wait in the queue
    small = ResourceSpec(cpu=0.5, memory="128m")
    jobs = []
    with IrisClient.connect(info.address, store=info.store_url, user="ivy") as ivy, \
            IrisClient.connect(info.address, store=info.store_url, user="jo") as jo:  # fmt: skip
        try:
            running = ivy.submit_command(
                [sys.executable, "-c", f"import os, time\nwhile not os.path.exists({str(go)!r}): time.sleep(0.1)"],
                name="ivy-running", resources=small, constraints=CPU_WORKERS,
            )  # fmt: skip
            jobs.append(running)
            eventually(lambda: running.status().task_state_counts.get("RUNNING") == 1, 60, "ivy's task runs")
            for client, name in ((ivy, "ivy-1"), (ivy, "ivy-2"), (jo, "jo-1")):
                jobs.append(client.submit_command(["true"], name=name, resources=small, constraints=nowhere))
            waiting = [job.job_id for job in jobs[1:]]

            def listed() -> list[str]:
                open_page(browser, f"{info.dashboard_url}/queue")
                ids = browser.execute_script(
                    "return [...document.querySelectorAll('#queue tr[data-job]')].map(r => r.dataset.job);"
                )
                return [job_id for job_id in ids if job_id in waiting]

            shown = eventually(lambda: len(found := listed()) == 3 and found, 60, "the three waiting jobs listed")
            assert [waiting[2], waiting[0], waiting[1]] == shown
            users = [text_of(browser, f'#queue tr[data-job="{job_id}"] td:nth-child(4)') for job_id in shown]
            assert ["jo", "ivy", "ivy"] == users
        finally:
            go.touch()
            for job in jobs:
                job.terminate()


def test_every_page_renders_without_console_errors(cluster: Cluster, browser: Any) -> None:
    """Each page, and the placeholders that say what is not there yet, load cleanly in chromium."""
    for page in PAGES:
        open_page(browser, f"{cluster.info.dashboard_url}/{page}")
        assert page.capitalize() == text_of(browser, "h1").split()[0]
    open_page(browser, f"{cluster.info.dashboard_url}/users")
    assert "No user has run anything" in text_of(browser, "#placeholder") or "User" in text_of(browser, "#users")
    open_page(browser, f"{cluster.info.dashboard_url}/fleet")
    assert "cpu" in text_of(browser, "figure")


def test_cli_prints_the_dashboard_url(cluster: Cluster) -> None:
    """`iris dashboard` and `iris cluster status` name the URL the controller serves the dashboard on."""
    env = {k: v for k, v in cluster.env.items() if not k.startswith("IRIS_TEMPORAL")}
    url = subprocess.run([sys.executable, "-m", "iris", "dashboard"], env=env, capture_output=True, text=True,
                         check=True, timeout=60).stdout.strip()  # fmt: skip
    assert cluster.info.dashboard_url == url
    status = subprocess.run([sys.executable, "-m", "iris", "cluster", "status"], env=env, capture_output=True,
                            text=True, check=True, timeout=60).stdout  # fmt: skip
    assert f"Dashboard: {url}" in status.splitlines()


def test_actions_survive_a_controller_restart(cluster: Cluster, client: IrisClient, browser: Any) -> None:
    """The actions log is Temporal's record, not the controller's memory: a new controller shows the same."""
    from selenium.common.exceptions import WebDriverException

    job = client.submit_command([sys.executable, "-c", "pass"], name="dash-durable",
                                resources=ResourceSpec(cpu=0.5, memory="128m"))  # fmt: skip
    job.wait(timeout=120)
    open_page(browser, f"{cluster.info.dashboard_url}/queue")
    since = eventually(lambda: depth_since(browser), 60, "a queue-depth picture (two samples)")
    assert cluster.local.kill_process("controller", signal.SIGTERM, wait=20)
    cluster.local.restart_process("controller")
    url = f"{cluster.info.dashboard_url}/actions?job={job.job_id}"

    def shown() -> str:
        try:
            browser.get(url)
        except WebDriverException:  # the new controller is not listening yet
            return ""
        return text_of(browser, "#actions")

    actions = eventually(lambda: "job succeeded" in shown() and text_of(browser, "#actions"), 90, "actions again")
    assert "job submitted" in actions
    open_page(browser, url)
    client.list_workers()  # the restarted controller answers the scheduler's queries again
    open_page(browser, f"{cluster.info.dashboard_url}/queue")  # the picture starts where it did before the restart
    assert since == eventually(lambda: depth_since(browser), 30, "the queue-depth picture again")
