import time

import pytest

from hotloop.measure.stages import StageTimer, null_timer


def _busy(ms: float) -> None:
    end = time.perf_counter() + ms / 1000
    while time.perf_counter() < end:
        pass


def test_nested_stages_get_paths_and_add_up():
    timer = StageTimer()
    timer.begin_iteration()
    with timer.stage("outer"):
        with timer.stage("a"):
            _busy(2)
        with timer.stage("b"):
            _busy(1)
    host, device = timer.end_iteration()
    assert set(host) == {"outer", "outer/a", "outer/b"}
    assert device == {}
    children = host["outer/a"] + host["outer/b"]
    # The parent contains its children: never less than their sum, and only timer overhead more.
    assert host["outer"] >= children
    assert host["outer"] - children < 0.5 * host["outer"]
    assert timer.stage_order == ["outer", "outer/a", "outer/b"]  # a parent before its children


def test_repeated_stage_is_summed_within_an_iteration():
    timer = StageTimer()
    timer.begin_iteration()
    for _ in range(3):
        with timer.stage("step"):
            _busy(0.5)
    host, _ = timer.end_iteration()
    assert list(host) == ["step"]
    assert host["step"] >= 1.5


def test_iterations_are_independent():
    timer = StageTimer()
    timer.begin_iteration()
    with timer.stage("x"):
        pass
    timer.end_iteration()
    timer.begin_iteration()
    host, _ = timer.end_iteration()
    assert host == {}


def test_stage_names_cannot_contain_slash():
    with pytest.raises(ValueError, match="must not contain"), StageTimer().stage("a/b"):
        pass


def test_null_timer_records_nothing():
    timer = null_timer()
    timer.begin_iteration()
    with timer.stage("x"):
        pass
    assert timer.end_iteration() == ({}, {})
