"""A binary min-heap of item ids for compiled event loops (numba).

The heap holds ids into parallel key arrays and orders them by (``key_time``, ``key_seq``):
the earlier time first, ties by the smaller sequence number. The simulator's pending
completions and the list schedulers' ready ops both use it, each encoding its own tie rule
in ``key_seq``.
"""

from __future__ import annotations

import numba


@numba.njit(cache=True, inline="always")
def earlier(t1, s1, t2, s2):
    """(t1, s1) comes before (t2, s2)."""
    return t1 < t2 or (t1 == t2 and s1 < s2)


@numba.njit(cache=True, inline="always")
def _before(a, b, key_time, key_seq):
    return earlier(key_time[a], key_seq[a], key_time[b], key_seq[b])


@numba.njit(cache=True, inline="always")
def heap_push(heap, size, key_time, key_seq, item):
    """Push ``item`` onto the min-heap ``heap[:size]``; the new size."""
    i = size
    while i > 0:
        parent = (i - 1) >> 1
        if not _before(item, heap[parent], key_time, key_seq):
            break
        heap[i] = heap[parent]
        i = parent
    heap[i] = item
    return size + 1


@numba.njit(cache=True, inline="always")
def heap_pop(heap, size, key_time, key_seq):
    """Remove the top of ``heap[:size]`` (read it from heap[0] first); the new size."""
    size -= 1
    item = heap[size]
    i = 0
    while True:
        child = 2 * i + 1
        if child >= size:
            break
        if child + 1 < size and _before(heap[child + 1], heap[child], key_time, key_seq):
            child += 1
        if not _before(heap[child], item, key_time, key_seq):
            break
        heap[i] = heap[child]
        i = child
    heap[i] = item
    return size
