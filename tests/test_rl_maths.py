"""PPO's clipped loss, REINFORCE and the EMA baseline against hand-computed values."""

import math

import numpy as np
import pytest
import torch

from trinity.rl.algorithms import EMABaseline, normalised_advantages, ppo_loss, reinforce_loss


def test_ema_baseline():
    b = EMABaseline(decay=0.5)
    adv = b.advantages(torch.tensor([1.0, 3.0]))  # first batch: b = its mean, 2
    assert adv.tolist() == [-1.0, 1.0] and b.value == 2.0
    adv = b.advantages(torch.tensor([6.0, 6.0]))  # against b = 2, then b = 0.5*2 + 0.5*6 = 4
    assert adv.tolist() == [4.0, 4.0] and b.value == 4.0


def test_ppo_loss_clips_by_hand():
    old = torch.zeros(3)
    new = torch.log(torch.tensor([1.5, 0.5, 1.1]))  # ratios 1.5, 0.5, 1.1
    adv = torch.tensor([2.0, -1.0, 1.0])
    loss, stats = ppo_loss(new, old, adv, clip=0.2)
    # min(1.5*2, 1.2*2) = 2.4; min(0.5*-1, 0.8*-1) = -0.8; min(1.1, 1.1) = 1.1
    assert float(loss) == pytest.approx(-(2.4 - 0.8 + 1.1) / 3)
    assert stats["clipfrac"] == pytest.approx(2 / 3)
    kl = [(r - 1) - math.log(r) for r in (1.5, 0.5, 1.1)]
    assert stats["approx_kl"] == pytest.approx(sum(kl) / 3, rel=1e-6)


def test_ppo_gradient_vanishes_where_clipped():
    new = torch.log(torch.tensor([1.5, 1.0])).requires_grad_()
    loss, _ = ppo_loss(new, torch.zeros(2), torch.tensor([2.0, 2.0]), clip=0.2)
    loss.backward()
    # clipped sample: no gradient; unclipped: d(-r*A/2)/dlogp = -r*A/2 = -1
    assert new.grad.tolist() == pytest.approx([0.0, -1.0])


def test_reinforce_loss():
    logp = torch.tensor([-1.0, -2.0], requires_grad=True)
    loss = reinforce_loss(logp, torch.tensor([1.0, -3.0]))
    assert loss.item() == pytest.approx(-(-1.0 + 6.0) / 2)
    loss.backward()
    assert logp.grad.tolist() == [-0.5, 1.5]


def test_normalised_advantages():
    # mean 2, sample std 1
    assert normalised_advantages(torch.tensor([1.0, 2.0, 3.0])).tolist() == pytest.approx([-1.0, 0.0, 1.0])
    # mean 4, sample std sqrt(8): the scale of the rewards does not matter
    assert normalised_advantages(torch.tensor([2.0, 6.0])).tolist() == pytest.approx([-2 ** -0.5, 2 ** -0.5])
    assert normalised_advantages(torch.tensor([5.0])).tolist() == [0.0]  # one sample: no relative signal


def test_relabelled_devices_by_hand():
    import numpy as np

    from trinity.rl.algorithms import relabelled_devices

    # group 0 likes device 0, group 1 device 1 (and 0 next), group 2 has no preference
    log_sched = torch.log(torch.tensor([[0.7, 0.1, 0.1, 0.1], [0.2, 0.6, 0.1, 0.1], [0.25, 0.25, 0.25, 0.25]]))
    devices = torch.tensor([[2, 3, 3], [0, 1, 0], [3, 3, 3], [1, 1, 1]])
    every = np.zeros(4, np.int64)
    # row 0: 2 -> 0 and 3 -> 1 (0.7 * 0.6 * 0.25, the largest of any labelling); row 1 is already the likeliest;
    # rows 2 and 3 put every group on one device, likeliest on device 0 (0.7 * 0.2 against 0.1 * 0.6 on 1)
    assert relabelled_devices(devices, log_sched, every).tolist() == [[0, 1, 1], [0, 1, 0], [0, 0, 0], [0, 0, 0]]
    # no two devices interchangeable: nothing moves
    assert relabelled_devices(devices, log_sched, np.arange(4)).tolist() == devices.tolist()
    # classes {0, 1} and {2, 3}: rows 0 and 2 may only swap 2 and 3, which ties (0.1 * 0.1 either way): kept;
    # row 3 moves from 1 to 0 within its class
    assert relabelled_devices(devices, log_sched, np.array([0, 0, 2, 2])).tolist() == \
        [[2, 3, 3], [0, 1, 0], [3, 3, 3], [0, 0, 0]]


def test_block_moved_devices_by_hand():
    from trinity.rl.algorithms import block_moved_devices, block_sizes

    assert block_sizes(64) == [4, 8, 16] and block_sizes(12) == [1, 3] and block_sizes(2) == [1]
    devices = torch.arange(32).reshape(4, 8) % 3  # rows 0-3 of 8 groups on devices 0-2
    gen = torch.Generator().manual_seed(7)
    # the draws, in the order the function takes them: which rows, then per row its size, start and device
    g = torch.Generator().manual_seed(7)
    rows = torch.randperm(4, generator=g)[:2].tolist()
    expected = devices.clone()
    for row in rows:
        size = [1, 2][int(torch.randint(2, (1,), generator=g))]
        start = int(torch.randint(8 // size, (1,), generator=g)) * size
        expected[row, start:start + size] = int(torch.randint(5, (1,), generator=g))
    moved = block_moved_devices(devices, 5, 0.5, gen)
    assert moved.tolist() == expected.tolist()
    # those draws here: row 2's groups 6-7 (a block of 2) onto device 3, row 3's group 3 (a block of 1) onto 2
    assert moved.tolist() == [[0, 1, 2, 0, 1, 2, 0, 1], [2, 0, 1, 2, 0, 1, 2, 0],
                              [1, 2, 0, 1, 2, 0, 3, 3], [0, 1, 2, 2, 1, 2, 0, 1]]
    assert devices.tolist() == (torch.arange(32).reshape(4, 8) % 3).tolist()  # the input is not changed
    changed = [r for r in range(4) if moved[r].tolist() != devices[r].tolist()]
    assert set(changed) <= set(rows)
    # nothing moved, nothing drawn: the generator is where it was
    gen = torch.Generator().manual_seed(3)
    assert block_moved_devices(devices, 5, 0.1, gen) is devices  # round(0.4) = 0 rows
    assert torch.equal(gen.get_state(), torch.Generator().manual_seed(3).get_state())


def test_neighbour_moved_groups_by_hand():
    """A star: unit 0 in the middle, linked to 1 (on its device, 0) and to 2 and 3 (device 1); each unit its own
    group, group g on device [0, 0, 1, 1][g]. With no followers (max_moved 1) a move is one of: unit 0 into group
    2 or 3, unit 2 or 3 into group 0, or none (unit 1 has no neighbour on another device)."""
    from trinity.rl.algorithms import neighbour_moved_groups

    neighbours = (np.array([0, 3, 4, 5, 6]), np.array([1, 2, 3, 0, 0, 0]))  # CSR: 0-{1,2,3}, 1-{0}, 2-{0}, 3-{0}
    groups = torch.arange(4).repeat(8, 1)
    devices = torch.tensor([0, 0, 1, 1]).repeat(8, 1)
    gen = torch.Generator().manual_seed(5)
    # the draws, in the order the function takes them: which rows, then per row its unit, the neighbour across, and
    # how many follow (0 of 1 here, drawn all the same)
    g = torch.Generator().manual_seed(5)
    rows = torch.randperm(8, generator=g)[:4].tolist()
    expected = groups.clone()
    away = {0: [2, 3], 1: [], 2: [0], 3: [0]}
    for row in rows:
        u = int(torch.randint(4, (1,), generator=g))
        if away[u]:
            expected[row, u] = away[u][int(torch.randint(len(away[u]), (1,), generator=g))]
            torch.randint(1, (1,), generator=g)
    moved = neighbour_moved_groups(groups, devices, neighbours, 0.5, gen, max_moved=1)
    assert moved.tolist() == expected.tolist()
    # those draws here: row 3 drew unit 1 and stays as sampled, row 6's unit 0 into group 2, rows 0's and 2's
    # unit 2 into group 0
    assert rows == [3, 6, 0, 2]
    assert {r: moved[r].tolist() for r in rows} == {3: [0, 1, 2, 3], 6: [2, 1, 2, 3], 0: [0, 1, 0, 3],
                                                    2: [0, 1, 0, 3]}
    assert groups.tolist() == torch.arange(4).repeat(8, 1).tolist()  # the input is not changed
    # followers: unit 0's neighbours on its side (unit 1) may follow it into the group across
    many = neighbour_moved_groups(torch.arange(4).repeat(400, 1), torch.tensor([0, 0, 1, 1]).repeat(400, 1),
                                  neighbours, 1.0, torch.Generator().manual_seed(0), max_moved=3)
    outcomes = {tuple(row) for row in many.tolist()}
    assert outcomes == {(0, 1, 2, 3), (2, 1, 2, 3), (3, 1, 2, 3), (2, 2, 2, 3), (3, 3, 2, 3), (0, 1, 0, 3),
                        (0, 1, 2, 0)}
    # nothing moved, nothing drawn: the generator is where it was
    gen = torch.Generator().manual_seed(3)
    assert neighbour_moved_groups(groups, devices, neighbours, 0.05, gen) is groups  # round(0.4) = 0 rows
    assert torch.equal(gen.get_state(), torch.Generator().manual_seed(3).get_state())


def test_a_block_move_puts_one_aligned_block_on_one_device():
    from trinity.rl.algorithms import block_moved_devices

    devices = torch.full((200, 16), 9)  # no device 9 is ever drawn (4 devices): every moved group shows
    moved = block_moved_devices(devices, 4, 1.0, torch.Generator().manual_seed(0))
    for row in moved:
        at = torch.nonzero(row != 9)[:, 0].tolist()
        size = len(at)
        assert size in (1, 2, 4) and at == list(range(at[0], at[0] + size)) and at[0] % size == 0
        assert len(set(row[at].tolist())) == 1 and 0 <= int(row[at[0]]) < 4
