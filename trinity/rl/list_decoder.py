"""The learned list scheduler's decode: m-ETF's list scheduling with each choice left to a policy.

One episode places every op. At each step the *select* policy picks the next op among the ready
ones (every predecessor placed) and the *place* policy picks its device; an op whose colocation
group is already placed follows it, and a device without room for the op's whole group is no
candidate (as `trinity.placers.list_scheduling` does). Start times follow the same communication
model as m-ETF's (`list_scheduling._score`): a tensor is sent once to each device that reads it,
one transfer at a time per sender.

The policies' logits are linear in a few dynamic features of the state, with coefficients per op
that the graph encoder computes once per episode batch (`trinity.rl.learned_list`):

    select logit(j)    = sum_k cs[j, k] * fs_k(j)         over ready ops j
    place  logit(j, d) = sum_k cp[j, k] * fp_k(j, d)      over devices d with room

so the decode runs compiled, with no network call per step. It records, per decision, every
candidate's features and which one was taken: the update recomputes the log-probabilities from
them under the current coefficients (one vectorised pass, `decision_log_probs`).

The select candidates are the ``candidates`` ready ops m-ETF would take first (earliest start, then
topological position): a wide graph has hundreds ready at once, most of them no choice worth
recording. Select features (SELECT_FEATURES): 1 if m-ETF would take this op now (earliest start, then
topological position), -log(1 + (its earliest start - the earliest of all) / s), the same for its
earliest finish, and a constant 1 (so the op's coefficient is a static priority). Place features
(PLACE_FEATURES): 1 if m-ETF's device (earliest start, then lower index), -log(1 + start gap / s),
-log(1 + finish gap / s), the share of the op's input bytes already on the device, the device's
busy time against the mean (-log of the ratio), and its free memory share. s is the graph's mean
op time.

Modes: sample (Gumbel-max with a seed; with probability ``uniform`` a decision is uniform over its
candidates instead), greedy (argmax; ties to the lower topological position and the lower device, as
m-ETF's), and teacher (every choice m-ETF's, or a given unit -> device
map's for the place choice): the imitation's trajectories.
"""

from __future__ import annotations

import numba
import numpy as np

SELECT_FEATURES = ("etf_choice", "start_gap", "finish_gap", "priority")
PLACE_FEATURES = ("etf_device", "start_gap", "finish_gap", "local_inputs", "load", "free_memory")
KS, KP = len(SELECT_FEATURES), len(PLACE_FEATURES)

SAMPLE, GREEDY, TEACHER = 0, 1, 2


@numba.njit(cache=True)
def _inputs(j, in_ptr, in_src, in_tensor, in_bytes, placement, finish, sender_free, copy_head, copy_dev, copy_time,
            copy_next, latency, bandwidth, arrival, inp, local):
    """When every input of ready op ``j`` can be on each device (its inputs' earliest arrivals) into ``inp``;
    the bytes of its inputs already on each device into ``local``. Its earliest start on a device is this or the
    device's free time, whichever is later."""
    n_dev = inp.shape[0]
    for dd in range(n_dev):
        inp[dd] = 0.0
        local[dd] = 0.0
    for k in range(in_ptr[j], in_ptr[j + 1]):
        u = in_src[k]
        tk = in_tensor[k]
        if tk < 0:
            for dd in range(n_dev):
                inp[dd] = max(inp[dd], finish[u])
            continue
        s = placement[u]
        leave = max(finish[u], sender_free[s])
        for dd in range(n_dev):
            arrival[dd] = leave + latency[s, dd] + in_bytes[k] / bandwidth[s, dd]
        arrival[s] = finish[u]
        c = copy_head[tk]
        while c >= 0:
            dd = copy_dev[c]
            if copy_time[c] < arrival[dd]:
                arrival[dd] = copy_time[c]
            if dd != s:
                local[dd] += in_bytes[k]
            c = copy_next[c]
        local[s] += in_bytes[k]
        for dd in range(n_dev):
            inp[dd] = max(inp[dd], arrival[dd])


@numba.njit(cache=True)
def _before(t, p, t2, p2):
    return t < t2 or (t == t2 and p < p2)


@numba.njit(cache=True)
def _grow(a, need):
    if need <= a.shape[0]:
        return a
    shape = (max(need, 2 * a.shape[0]),) + a.shape[1:]
    b = np.empty(shape, a.dtype)
    b[:a.shape[0]] = a
    return b


@numba.njit(cache=True)
def decode(times, pos, in_ptr, in_src, in_tensor, in_bytes, out_ptr, out_dst, tensor_offset, n_tensors, group,
           group_bytes, memory, latency, bandwidth, cs, cp, mode, learn_select, target_group_device, seed, scale,
           uniform, candidates):
    """One episode. Returns (placement, order, select records, place records); a record set is
    (decision id per candidate, op, device (place only), features, taken flag)."""
    n, n_dev = times.shape
    if seed >= 0:
        np.random.seed(seed)
    free = memory.copy()
    group_device = np.full(group_bytes.shape[0], -1, np.int64)
    placement = np.full(n, -1, np.int64)
    order = np.empty(n, np.int64)
    finish = np.zeros(n)
    device_free = np.zeros(n_dev)
    sender_free = np.zeros(n_dev)
    busy = np.zeros(n_dev)
    remaining = np.zeros(n, np.int64)
    for v in out_dst:
        remaining[v] += 1
    cap = n_tensors + in_src.shape[0] + 1
    copy_head = np.full(n_tensors, -1, np.int64)
    copy_dev = np.empty(cap, np.int64)
    copy_time = np.empty(cap)
    copy_next = np.empty(cap, np.int64)
    n_copies = 0
    ready = np.empty(n, np.int64)
    n_ready = 0
    for v in range(n):
        if remaining[v] == 0:
            ready[n_ready] = v
            n_ready += 1
    est = np.empty((n, n_dev))  # per ready op (indexed by its slot in `ready`)
    # per op, kept while it waits: its inputs' arrivals and local bytes change only when the device holding one
    # of them queues a transfer (which is also when one of them gets a copy), so only then are they recomputed
    inp = np.zeros((n, n_dev))
    local = np.zeros((n, n_dev))
    stale = np.ones(n, np.bool_)
    queued = np.zeros(n_dev, np.bool_)  # senders that got a transfer queued at the last commit
    any_queued = False
    arrival = np.empty(n_dev)
    est_min = np.empty(n)
    eft_min = np.empty(n)
    # records
    s_dec = np.empty(4 * n, np.int64)
    s_op = np.empty(4 * n, np.int64)
    s_feat = np.empty((4 * n, cs.shape[1]))
    s_taken = np.empty(4 * n, np.bool_)
    n_s = 0
    p_dec = np.empty(2 * n, np.int64)
    p_op = np.empty(2 * n, np.int64)
    p_dev = np.empty(2 * n, np.int64)
    p_feat = np.empty((2 * n, cp.shape[1]))
    p_taken = np.empty(2 * n, np.bool_)
    n_p = 0
    in_total = np.zeros(n)
    for j in range(n):
        for k in range(in_ptr[j], in_ptr[j + 1]):
            if in_tensor[k] >= 0:
                in_total[j] += in_bytes[k]
    cand = np.empty(n, np.int64)

    for step in range(n):
        # every ready op's start on every device
        t0 = np.inf
        f0 = np.inf
        etf = -1
        for i in range(n_ready):
            j = ready[i]
            if any_queued and not stale[j]:
                for k in range(in_ptr[j], in_ptr[j + 1]):
                    if in_tensor[k] >= 0 and queued[placement[in_src[k]]]:
                        stale[j] = True
                        break
            if stale[j]:
                _inputs(j, in_ptr, in_src, in_tensor, in_bytes, placement, finish, sender_free, copy_head,
                        copy_dev, copy_time, copy_next, latency, bandwidth, arrival, inp[j], local[j])
                stale[j] = False
            g = group[j]
            pinned = group_device[g]
            for dd in range(n_dev):  # no room for its group, or its group is pinned elsewhere: no start there
                if (pinned >= 0 and dd != pinned) or (pinned < 0 and group_bytes[g] > free[dd]):
                    est[i, dd] = np.inf
                else:
                    est[i, dd] = max(device_free[dd], inp[j, dd])
            m = np.inf
            mf = np.inf
            for dd in range(n_dev):
                if est[i, dd] < m:
                    m = est[i, dd]
                if est[i, dd] + times[j, dd] < mf:
                    mf = est[i, dd] + times[j, dd]
            if m == np.inf:  # no device has room for its group: m-ETF fails; here it goes where most is free
                dd = np.argmax(free)
                m = max(device_free[dd], 0.0)
                mf = m + times[j, dd]
                est[i, dd] = m
            est_min[i] = m
            eft_min[i] = mf
            if etf < 0 or m < t0 or (m == t0 and pos[j] < pos[ready[etf]]):
                etf = i
                t0 = min(t0, m)
            f0 = min(f0, mf)
        # select
        pick = etf
        if learn_select and n_ready > 1:
            # the candidates: the `candidates` ready ops m-ETF would take first (all when <= 0)
            n_c = n_ready if candidates <= 0 or n_ready <= candidates else candidates
            if n_c == n_ready:
                for i in range(n_ready):
                    cand[i] = i
            else:
                m = 0
                for i in range(n_ready):  # insertion into the n_c earliest (start, position)
                    if m == n_c:
                        last = cand[m - 1]
                        if not _before(est_min[i], pos[ready[i]], est_min[last], pos[ready[last]]):
                            continue
                    k = m if m < n_c else n_c - 1
                    while k > 0 and _before(est_min[i], pos[ready[i]], est_min[cand[k - 1]], pos[ready[cand[k - 1]]]):
                        cand[k] = cand[k - 1]
                        k -= 1
                    cand[k] = i
                    m = min(m + 1, n_c)
            s_dec = _grow(s_dec, n_s + n_c)
            s_op = _grow(s_op, n_s + n_c)
            s_feat = _grow(s_feat, n_s + n_c)
            s_taken = _grow(s_taken, n_s + n_c)
            best = -np.inf
            pick_uniform = mode == SAMPLE and np.random.random() < uniform
            for c in range(n_c):
                i = cand[c]
                j = ready[i]
                r = n_s + c
                s_dec[r] = step
                s_op[r] = j
                s_feat[r, 0] = 1.0 if i == etf else 0.0
                s_feat[r, 1] = -np.log1p((est_min[i] - t0) / scale)
                s_feat[r, 2] = -np.log1p((eft_min[i] - f0) / scale)
                s_feat[r, 3] = 1.0
                x = 0.0
                for k in range(cs.shape[1]):
                    x += cs[j, k] * s_feat[r, k]
                if mode == SAMPLE:
                    x = np.random.random() if pick_uniform else x + np.random.gumbel(0.0, 1.0)
                if mode != TEACHER and (x > best or (x == best and pos[j] < pos[ready[pick]])):
                    best = x
                    pick = i
            for c in range(n_c):
                s_taken[n_s + c] = cand[c] == pick
            n_s += n_c
        j = ready[pick]
        # place
        g = group[j]
        e = est[pick]
        d_etf = 0
        for dd in range(n_dev):
            if e[dd] < e[d_etf]:
                d_etf = dd
        d = d_etf
        n_cand = 0
        for dd in range(n_dev):
            if e[dd] < np.inf:
                n_cand += 1
        if group_device[g] < 0 and n_cand > 1:
            p_dec = _grow(p_dec, n_p + n_dev)
            p_op = _grow(p_op, n_p + n_dev)
            p_dev = _grow(p_dev, n_p + n_dev)
            p_feat = _grow(p_feat, n_p + n_dev)
            p_taken = _grow(p_taken, n_p + n_dev)
            mean_busy = busy.mean()
            best = -np.inf
            pick_uniform = mode == SAMPLE and np.random.random() < uniform
            r0 = n_p
            for dd in range(n_dev):
                if e[dd] == np.inf:
                    continue
                r = n_p
                p_dec[r] = step
                p_op[r] = j
                p_dev[r] = dd
                p_feat[r, 0] = 1.0 if dd == d_etf else 0.0
                p_feat[r, 1] = -np.log1p((e[dd] - est_min[pick]) / scale)
                p_feat[r, 2] = -np.log1p(max(e[dd] + times[j, dd] - eft_min[pick], 0.0) / scale)
                p_feat[r, 3] = local[j, dd] / in_total[j] if in_total[j] > 0 else 0.0
                p_feat[r, 4] = -np.log((busy[dd] + scale) / (mean_busy + scale))
                p_feat[r, 5] = free[dd] / memory[dd] if memory[dd] > 0 else 0.0
                x = 0.0
                for k in range(cp.shape[1]):
                    x += cp[j, k] * p_feat[r, k]
                if mode == SAMPLE:
                    x = np.random.random() if pick_uniform else x + np.random.gumbel(0.0, 1.0)
                if mode != TEACHER and x > best:
                    best = x
                    d = dd
                n_p += 1
            if mode == TEACHER and target_group_device.shape[0] and target_group_device[g] >= 0 \
                    and e[target_group_device[g]] < np.inf:
                d = target_group_device[g]
            for r in range(r0, n_p):
                p_taken[r] = p_dev[r] == d
        elif group_device[g] >= 0:
            d = group_device[g]
        # commit: input transfers on the senders' queues, then the op on d
        queued[:] = False
        any_queued = False
        begin = device_free[d]
        for k in range(in_ptr[j], in_ptr[j + 1]):
            u = in_src[k]
            tk = in_tensor[k]
            if tk < 0 or placement[u] == d:
                begin = max(begin, finish[u])
                continue
            s = placement[u]
            c = copy_head[tk]
            while c >= 0 and copy_dev[c] != d:
                c = copy_next[c]
            if c < 0:
                sent = max(finish[u], sender_free[s])
                sender_free[s] = sent + (latency[s, d] + in_bytes[k] / bandwidth[s, d])
                copy_dev[n_copies], copy_time[n_copies], copy_next[n_copies] = d, sender_free[s], copy_head[tk]
                copy_head[tk] = n_copies
                c = n_copies
                n_copies += 1
                queued[s] = True
                any_queued = True
            begin = max(begin, copy_time[c])
        finish[j] = device_free[d] = begin + times[j, d]
        busy[d] += times[j, d]
        for tk in range(tensor_offset[j], tensor_offset[j + 1]):
            copy_dev[n_copies], copy_time[n_copies], copy_next[n_copies] = d, finish[j], copy_head[tk]
            copy_head[tk] = n_copies
            n_copies += 1
        placement[j] = d
        order[step] = j
        if group_device[g] < 0:
            group_device[g] = d
            free[d] -= group_bytes[g]
        ready[pick] = ready[n_ready - 1]
        n_ready -= 1
        for k in range(out_ptr[j], out_ptr[j + 1]):
            v = out_dst[k]
            remaining[v] -= 1
            if remaining[v] == 0:
                ready[n_ready] = v
                n_ready += 1
    return (placement, order, s_dec[:n_s].copy(), s_op[:n_s].copy(), s_feat[:n_s].copy(), s_taken[:n_s].copy(),
            p_dec[:n_p].copy(), p_op[:n_p].copy(), p_dev[:n_p].copy(), p_feat[:n_p].copy(), p_taken[:n_p].copy())
