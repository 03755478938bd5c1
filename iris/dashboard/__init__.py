"""The Iris dashboard: the fleet, the queue and the jobs in a browser, served by the control plane.

`iris controller serve --dashboard-port P` serves it (loopback unless `--dashboard-host` says otherwise);
`iris dashboard` prints its URL. Read-only; it reads what Iris already publishes (see `reads`).
"""

from iris.dashboard.links import TemporalUI, default_ui_url
from iris.dashboard.server import Dashboard, DashboardServer

__all__ = ["Dashboard", "DashboardServer", "TemporalUI", "default_ui_url"]
