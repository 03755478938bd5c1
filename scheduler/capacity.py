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
stored as -1 in every column so no request ever fits them (free capacity is
never negative otherwise: `Resources` refuses it and a pass takes only what fits).
"""

from __future__ import annotations

from collections.abc import Sequence


class CapacityTree:
    """Max-segment tree over the free capacity of a list of worker rows (one class, best-fit order)."""

    __slots__ = ("cpu", "gpu", "known", "mem", "size", "tpu")

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
        self.size = size
        self.known: dict[tuple[int, int, int, int], int] = {}  # request -> its last first fit, -1: none
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
        """Return the position of the first member whose free capacity covers the request, or -1.

        A pass only lowers free capacity (`give_back` aside), so a request's first fit never moves left
        and a request that fits nowhere never fits later: the tree keeps each request's last answer and
        starts the next walk there, and answers "nowhere" again at once. Buckets with the same request
        (a preference's tiers, other constraints over the same class) share what one of them found.
        """
        cpu, mem, gpu, tpu = self.cpu, self.mem, self.gpu, self.tpu
        if cpu[1] < rc or mem[1] < rm or gpu[1] < rg or tpu[1] < rt:
            return -1
        key = (rc, rm, rg, rt)
        start = self.known.get(key, 0)
        if start < 0:
            return -1
        # From the root (or the leaf at `start`): a node whose maxima cover the request is entered at its
        # left child, a leaf that covers it is the answer; a node that does not (maxima of different
        # members, maybe, promised a fit none has) is left for the next subtree on its right, climbing
        # past right children (their parent's right turn was already taken), as a stack of untried right
        # siblings would. Nothing left of `start` is ever looked at: a climb only ever turns right.
        size = self.size
        node = start + size if start else 1
        # Free capacity is never below 0 but for a held member's -1 in every column, which the cpu test already
        # refuses (rc >= 0): a request of no gpus or tpus needs only cpu and memory tested.
        accelerators = rg > 0 or rt > 0
        while True:
            if cpu[node] < rc or mem[node] < rm or (accelerators and (gpu[node] < rg or tpu[node] < rt)):
                while node & 1:
                    node >>= 1
                if not node:
                    break
                node += 1
            elif node < size:
                node *= 2
            else:
                break
        found = self.known[key] = node - size if node else -1
        return found

    def update(self, position: int, cpu: int, mem: int, gpu: int, tpu: int) -> None:
        """Set one member's free capacity, lowered (as a pass does), and fix the maxima above it."""
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

    def give_back(self, position: int, cpu: int, mem: int, gpu: int, tpu: int) -> None:
        """Set one member's free capacity raised again (a tentative hold undone): what the tree knew of
        first fits may have moved left, so it is forgotten."""
        self.known.clear()
        self.update(position, cpu, mem, gpu, tpu)
