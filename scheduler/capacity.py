"""Free capacity of one worker class as a max-segment tree, for "first worker where this fits".

Plain tasks walk workers in best-fit order. A cursor per request would rescan
workers that other requests filled (hundreds of distinct requests times
thousands of workers), so each class keeps, over its members in best-fit
order, the maximum free cpu, memory, gpus and tpus of every subtree. Finding
the first member that fits a request is a leftmost descent pruned by those
maxima (a subtree whose maximum of any resource is too small cannot hold a
fitting worker), and a placement updates one leaf-to-root path, stopping as
soon as a node's maxima do not change.

The tree reads the pass's shared free-capacity arrays; reserved workers are
stored as -1 so no request ever fits them.
"""

from __future__ import annotations

from collections.abc import Sequence


class CapacityTree:
    """Max-segment tree over the free capacity of a list of worker rows (one class, best-fit order)."""

    __slots__ = ("cpu", "gpu", "mem", "rows", "size", "tpu")

    def __init__(
        self,
        rows: Sequence[int],
        cpu: Sequence[int],
        mem: Sequence[int],
        gpu: Sequence[int],
        tpu: Sequence[int],
        reserved: bytearray,
    ) -> None:
        size = 1
        while size < len(rows):
            size *= 2
        self.rows = list(rows)
        self.size = size
        pad = [-1] * (size - len(rows))
        self.cpu = [-1] * size + [-1 if reserved[r] else cpu[r] for r in rows] + pad
        self.mem = [-1] * size + [-1 if reserved[r] else mem[r] for r in rows] + pad
        self.gpu = [-1] * size + [-1 if reserved[r] else gpu[r] for r in rows] + pad
        self.tpu = [-1] * size + [-1 if reserved[r] else tpu[r] for r in rows] + pad
        for column in (self.cpu, self.mem, self.gpu, self.tpu):
            for node in range(size - 1, 0, -1):
                left, right = column[2 * node], column[2 * node + 1]
                column[node] = left if left >= right else right

    def first_fit(self, rc: int, rm: int, rg: int, rt: int) -> int:
        """Return the position of the first member whose free capacity covers the request, or -1."""
        cpu, mem, gpu, tpu = self.cpu, self.mem, self.gpu, self.tpu
        if cpu[1] < rc or mem[1] < rm or gpu[1] < rg or tpu[1] < rt:
            return -1
        # Leftmost descent: go left, keeping the right sibling to come back to when a subtree's maxima
        # (each resource's from a different member, maybe) promised a fit that no member has.
        size = self.size
        stack: list[int] = []
        push, pop = stack.append, stack.pop
        node = 1
        while node < size:
            node *= 2
            push(node + 1)
            while cpu[node] < rc or mem[node] < rm or gpu[node] < rg or tpu[node] < rt:
                if not stack:
                    return -1
                node = pop()
        return node - size

    def update(self, position: int, cpu: int, mem: int, gpu: int, tpu: int) -> None:
        """Set one member's free capacity (only ever lowered in a pass) and fix the maxima above it."""
        node = position + self.size
        ccol, mcol, gcol, tcol = self.cpu, self.mem, self.gpu, self.tpu
        ccol[node], mcol[node], gcol[node], tcol[node] = cpu, mem, gpu, tpu
        node //= 2
        while node:
            left, right = 2 * node, 2 * node + 1
            c = ccol[left] if ccol[left] >= ccol[right] else ccol[right]
            m = mcol[left] if mcol[left] >= mcol[right] else mcol[right]
            g = gcol[left] if gcol[left] >= gcol[right] else gcol[right]
            t = tcol[left] if tcol[left] >= tcol[right] else tcol[right]
            if c == ccol[node] and m == mcol[node] and g == gcol[node] and t == tcol[node]:
                return
            ccol[node], mcol[node], gcol[node], tcol[node] = c, m, g, t
            node //= 2
