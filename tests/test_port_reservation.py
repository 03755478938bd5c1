"""A port the local cluster picks is its server's from then on: the OS hands it to no other program.

`up` picks the ports of the dev server, its UI and the dashboard seconds before those servers bind
them. Run beside other programs that ask the OS for free ports (a test suite two files at a time did),
a merely free port was taken meanwhile and the controller exited; a dev server the supervisor started again
found its port taken and had to move. The check runs in a network namespace of its own whose ephemeral range
is 100 ports, so that every port the OS would hand out can be asked for.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from iris.local.processes import PICKED_PORTS
from tests.support import missing_engine

CHECK = """
import json, socket
from pathlib import Path
from iris.local.commands import free_port

Path("/proc/sys/net/ipv4/ip_local_port_range").write_text("40000 40099")
picked = {free_port() for _ in range(3)}
held = []
while True:  # every port bind(0) still hands out
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", 0))
    except OSError:
        break
    held.append(s)
bound = {s.getsockname()[1] for s in held}
for s in held:
    s.close()
listener = socket.socket()
listener.bind(("127.0.0.1", 0))
listener.listen(200)
clients = []
while True:  # every local port connect() still uses
    try:
        clients.append(socket.create_connection(("127.0.0.1", listener.getsockname()[1])))
    except OSError:
        break
connected = {c.getsockname()[1] for c in clients}
for c in clients:
    c.close()
served = []
for port in sorted(picked):  # each server binds its port as Go's and asyncio's listeners do
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        server.bind(("127.0.0.1", port))
        server.listen()
        served.append(port)
    except OSError:
        pass
print(json.dumps({"picked": sorted(picked), "bound": sorted(bound), "connected": sorted(connected),
                  "served": served}))
"""


def test_a_picked_port_goes_to_no_other_program_but_its_server_binds_it() -> None:
    if os.geteuid() != 0 or shutil.which("unshare") is None or shutil.which("ip") is None:
        missing_engine("a network namespace of the test's own needs root, unshare and ip")
    root = Path(__file__).resolve().parent.parent
    result = subprocess.run(
        ["unshare", "-n", "sh", "-c", 'ip link set lo up && exec "$0" -c "$1"', sys.executable, CHECK],
        capture_output=True, text=True, timeout=60, env={**os.environ, "PYTHONPATH": str(root)},
    )  # fmt: skip
    assert 0 == result.returncode, result.stderr
    seen = json.loads(result.stdout)
    assert 3 == len(seen["picked"])
    assert len(seen["bound"]) > 80 and len(seen["connected"]) > 80  # the range was used up
    assert [] == sorted(set(seen["picked"]) & set(seen["bound"]))
    assert [] == sorted(set(seen["picked"]) & set(seen["connected"]))
    assert seen["picked"] == seen["served"]
    # Below the range the OS hands out (and the ports tasks are given): once its server is gone and the
    # reservation's TIME_WAIT has passed, the port is still no program's but one that names it, so a server
    # started again keeps its address.
    assert all(port in PICKED_PORTS for port in seen["picked"]), seen["picked"]
