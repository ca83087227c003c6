"""How many candidates are built at once follows the cores and the memory, and the setting overrides it."""

from __future__ import annotations

import pytest

from aitune_core.config import Config, config
from aitune_core.executors import AutoExecutor
from aitune_core.executors.build_slots import MAX_PARALLEL_BUILDS, Machine, parallel_builds, threads_per_build

GIB = 2**30


@pytest.mark.parametrize(
    ("cores", "memory_gib", "expected"),
    [
        (1, 64, 1),  # one core: one build, in this process
        (2, 23, 1),  # this machine: one build keeps both cores busy
        (4, 23, 2),  # two cores per build
        (16, 8, 2),  # half of 8 GiB holds two builds of 2 GiB, whatever the cores
        (16, 2, 1),  # too little memory for two
        (64, 512, MAX_PARALLEL_BUILDS),  # capped
        (12, None, 6),  # memory unknown: the cores decide
    ],
)
def test_parallel_builds_follow_cores_and_memory(cores: int, memory_gib: int | None, expected: int) -> None:
    machine = Machine(cores, None if memory_gib is None else memory_gib * GIB)
    assert parallel_builds(machine) == expected


def test_the_setting_overrides_the_choice() -> None:
    assert parallel_builds(Machine(1, 64 * GIB), setting=3) == 3
    assert parallel_builds(Machine(64, 512 * GIB), setting=1) == 1
    assert threads_per_build(Machine(8, None), 2) == 4
    assert threads_per_build(Machine(2, None), 4) == 1


def test_the_environment_sets_the_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AITUNE_PARALLEL_BUILDS", "3")
    assert Config().parallel_builds == 3
    monkeypatch.setenv("AITUNE_PARALLEL_BUILDS", "auto")
    assert Config().parallel_builds is None
    monkeypatch.delenv("AITUNE_PARALLEL_BUILDS")
    assert Config().parallel_builds is None
    monkeypatch.setenv("AITUNE_PARALLEL_BUILDS", "0")
    with pytest.raises(ValueError, match="AITUNE_PARALLEL_BUILDS"):
        Config()
    with pytest.raises(ValueError, match="parallel_builds"):
        config.parallel_builds = 0


def test_auto_executor_builds_in_children_only_where_the_machine_allows() -> None:
    config.parallel_builds = None  # choose (the tests' default is one at a time)
    small = AutoExecutor(machine=Machine(1, 64 * GIB))
    assert small.builds == 1 and small.children is None
    assert small.describe() == "auto (in this process)"

    large = AutoExecutor(machine=Machine(8, 64 * GIB))
    assert large.builds == 4 and large.children is not None
    assert (large.children.workers, large.children.threads, large.children.background) == (4, 2, True)

    config.parallel_builds = 2
    told = AutoExecutor(machine=Machine(8, 64 * GIB))
    assert told.builds == 2 and told.children is not None
    assert (told.children.workers, told.children.threads) == (2, 4)
    for executor in (small, large, told):
        executor.close()
