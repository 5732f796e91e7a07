"""The checkpoint callback's cadence (:class:`agents.callbacks.Checkpoint`): every N env steps,
or every S seconds of training (the run directory's default), and always at the end."""

from __future__ import annotations

import pytest

from agents.callbacks import Checkpoint


class FakeLoop:
    """What the callback reads of a training loop: env steps and training wall time."""

    def __init__(self):
        self.env_steps, self.now = 0, 0.0

    def wall_s(self) -> float:
        return self.now


def saves_at(callback: Checkpoint, updates: list[tuple[int, float]], start: float = 0.0
             ) -> list[int]:
    saved: list[int] = []
    callback.save = lambda loop: saved.append(loop.env_steps)  # the write itself: tested apart
    loop = FakeLoop()
    loop.now = start
    callback.on_start(loop)
    for steps, now in updates:
        loop.env_steps, loop.now = steps, now
        callback.on_update(loop)
    callback.on_end(loop)
    return saved


def test_time_based_cadence_saves_at_the_first_update_past_each_interval(tmp_path):
    updates = [(100 * i, 4.0 * i) for i in range(1, 11)]  # one update every 4 s, to 40 s
    # 10 s after the start (12 s), then 10 s after that save (24 s), 36 s; and the end
    assert saves_at(Checkpoint(tmp_path, every=0, seconds=10), updates) == [300, 600, 900, 1000]


def test_step_cadence_ignores_the_clock(tmp_path):
    updates = [(100 * i, 1000.0 * i) for i in range(1, 11)]
    assert saves_at(Checkpoint(tmp_path, every=250, seconds=1), updates) == [
        300, 500, 800, 1000, 1000]  # on_end saves again (the real save skips a saved step)


def test_a_resumed_loop_counts_the_interval_from_where_it_resumed(tmp_path):
    # training wall time carries over a resume (90 s before it): the next one 10 s on
    cb = Checkpoint(tmp_path, every=0, seconds=10)
    assert saves_at(cb, [(50, 95.0), (60, 101.0), (70, 106.0)], start=90.0) == [60, 70]


@pytest.mark.parametrize("kwargs, match", [({"every": -1}, "every must be >= 0"),
                                           ({"every": 0, "seconds": 0}, "seconds must be > 0")])
def test_bad_cadence_refused(tmp_path, kwargs, match):
    with pytest.raises(ValueError, match=match):
        Checkpoint(tmp_path, **kwargs)
