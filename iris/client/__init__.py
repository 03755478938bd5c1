"""The client side of Iris: `IrisClient`/`AsyncIrisClient`, submission, and the reads of what Temporal holds."""
