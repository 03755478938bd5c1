"""A job's big command, env and setup, read once per job from the blob store (see JobRequest.launch_blob)."""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from dataclasses import replace

from google.protobuf.message import DecodeError

from activities.contracts import RunTaskInput
from activities.proto import cluster_pb2 as pb
from worker_agent.object_store import Blobs
from worker_agent.storage import StorageError

KEEP = 64  # launches of this many recent jobs stay in memory: a host runs few jobs at once


class LaunchUnreadableError(Exception):
    """The job's stored launch is missing or corrupt; the attempt fails saying so."""


class Launches:
    """Fills an attempt's argv, env and setup from its job's stored launch, reading each job's once."""

    def __init__(self, blobs: Blobs) -> None:
        self._blobs = blobs
        self._recent: OrderedDict[str, pb.Launch] = OrderedDict()

    async def resolve(self, inp: RunTaskInput) -> RunTaskInput:
        """`inp` with its launch filled in (unchanged when the job's launch was inline)."""
        if not inp.launch_blob:
            return inp
        launch = self._recent.get(inp.launch_blob)
        if launch is None:
            try:
                data = await asyncio.to_thread(self._blobs.get, inp.launch_blob)
                launch = pb.Launch.FromString(data)
            except (StorageError, OSError, DecodeError) as err:
                raise LaunchUnreadableError(f"cannot read the job's command and environment: {err}") from err
            self._recent[inp.launch_blob] = launch
            while len(self._recent) > KEEP:
                self._recent.popitem(last=False)
        return replace(inp, argv=list(launch.argv), env=dict(launch.env), setup=list(launch.setup), launch_blob="")
