"""Progress reports: plain lines at a steady interval when stderr is not a terminal."""

import pytest

from trinity.progress import PlainProgress, format_duration, progress


class FakeClock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_plain_lines_at_a_steady_interval(capsys):
    clock = FakeClock()
    bar = progress(total=1000, desc="search", clock=clock)
    assert isinstance(bar, PlainProgress)  # capsys' stderr is no terminal
    for _ in range(12):  # 12 updates of 10, one every 3.2 s: a line once 30 s have passed
        clock.now += 3.2
        bar.update(10)
        bar.set_postfix(best_ms=461.2)
    clock.now += 2.0
    bar.close()
    bar.close()  # closing twice reports once
    assert capsys.readouterr().err.splitlines() == [
        "search: 100/1000 (10%), 3.1 it/s, 4m48s left, best_ms=461.2",
        "search: 120/1000 (12%), 3.0 it/s, took 40s, best_ms=461.2",
    ]


def test_iteration_without_total_or_desc(capsys):
    clock = FakeClock()

    def items():
        for i in range(5):
            clock.now += 10.0
            yield i

    assert list(progress(items(), unit="step", interval_s=25.0, clock=clock)) == [0, 1, 2, 3, 4]
    assert capsys.readouterr().err.splitlines() == [
        "3 step, 0.1 step/s",
        "5 step, 0.1 step/s, took 50s",
    ]


def test_iterating_a_sized_iterable_knows_its_total_and_a_slow_rate_reads_per_unit(capsys):
    clock = FakeClock()
    with progress(desc="measure", unit="run", interval_s=100.0, clock=clock) as bar:
        clock.now += 60.0
        bar.update(1)
    assert capsys.readouterr().err == "measure: 1 run, 60.0 s/run, took 1m00s\n"
    clock = FakeClock()
    for _ in progress(range(4), desc="rounds", clock=clock):
        clock.now += 1.0
    assert capsys.readouterr().err == "rounds: 4/4 (100%), 1.0 it/s, took 4s\n"


def test_disable_prints_nothing(capsys):
    clock = FakeClock()
    bar = progress(total=10, desc="x", interval_s=0.0, disable=True, clock=clock)
    clock.now += 1.0
    bar.update(5)
    bar.close()
    assert capsys.readouterr().err == ""


def test_a_terminal_gets_tqdm():
    from tqdm import tqdm

    class Terminal:
        def isatty(self):
            return True

        def write(self, s):
            pass

        def flush(self):
            pass

    bar = progress(total=3, desc="t", file=Terminal(), leave=False)
    assert isinstance(bar, tqdm)
    bar.update(3)
    bar.close()


@pytest.mark.parametrize("seconds, text", [(0.4, "0s"), (45, "45s"), (285, "4m45s"), (3600, "1h00m"),
                                           (7380, "2h03m")])
def test_format_duration(seconds, text):
    assert format_duration(seconds) == text
