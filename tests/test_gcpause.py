"""The cyclic collector is paused while `fit`, `enumerate` and `project` compute (`primus.gcpause`), and
its state is restored after; the CLI runs those three commands with it off (issue 16: the collector's
passes over the search's caches cost a quarter of `project`'s time)."""

from __future__ import annotations

import gc
import sys
from collections.abc import Iterator

import pytest

import primus.cli.main as cli_main
from primus import api
from primus.gcpause import paused_gc, with_paused_gc


@pytest.fixture
def collector_enabled() -> Iterator[None]:
    was = gc.isenabled()
    gc.enable()
    yield
    if was:
        gc.enable()
    else:
        gc.disable()


def test_the_collector_is_off_inside_and_on_again_after(collector_enabled: None) -> None:
    with paused_gc():
        assert not gc.isenabled()
    assert gc.isenabled()


def test_a_collector_the_caller_disabled_stays_disabled(collector_enabled: None) -> None:
    gc.disable()
    with paused_gc():
        assert not gc.isenabled()
    assert not gc.isenabled()


def test_the_collector_is_restored_when_the_computation_raises(collector_enabled: None) -> None:
    @with_paused_gc
    def refuse() -> None:
        raise ValueError("bad input")

    with pytest.raises(ValueError, match="bad input"):
        refuse()
    assert gc.isenabled()


def test_project_computes_with_the_collector_off(monkeypatch: pytest.MonkeyPatch, collector_enabled: None) -> None:
    seen: list[bool] = []
    import primus.projection as projection

    def spy(*args: object, **kwargs: object) -> object:
        seen.append(gc.isenabled())
        raise projection.NothingFits("spy")

    monkeypatch.setattr(projection, "complete_and_project", spy)
    api.project("examples/llama3.1-70b-mi300x.yaml")
    assert seen == [False]
    assert gc.isenabled()


@pytest.mark.parametrize(("argv", "off"), [(["fit", "job.yaml"], True), (["enumerate", "--count", "job.yaml"], True),
                                           (["project", "job.yaml"], True), (["tune", "job.yaml"], False),
                                           (["measure", "job.yaml"], False), (["--help"], False)])
def test_the_cli_turns_the_collector_off_for_one_shot_commands_only(
        monkeypatch: pytest.MonkeyPatch, collector_enabled: None, argv: list[str], off: bool) -> None:
    monkeypatch.setattr(sys, "argv", ["primus", *argv])
    monkeypatch.setattr(cli_main, "cli", lambda prog_name: None)
    cli_main.main()
    assert gc.isenabled() is not off


def test_overlapping_pauses_restore_the_collector_only_when_the_last_one_ends() -> None:
    # two API calls in flight at once (two threads): the first to finish must not turn the collector back
    # on under the other (review 40, item 5)
    import gc

    from primus.gcpause import paused_gc

    assert gc.isenabled()
    outer = paused_gc()
    outer.__enter__()
    with paused_gc():
        assert not gc.isenabled()
    assert not gc.isenabled()  # the outer block still runs
    outer.__exit__(None, None, None)
    assert gc.isenabled()
