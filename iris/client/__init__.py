"""The client side of Iris: `IrisClient`/`AsyncIrisClient`, submission, and the reads of what Temporal holds."""

from iris.client.iris_client import AsyncIrisClient, IrisClient, Job  # what `iris.client` gave before the split

__all__ = ["AsyncIrisClient", "IrisClient", "Job"]
