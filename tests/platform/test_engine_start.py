"""The engine's start beside the driver's work (pipelines/platform/release.py): the workers are
warmed up only while the driver is still busy with work of its own, never in front of a release
that is already waiting (issue 15: there the warm-up job only added 1-2 s on ``local[2]`` and 3-6 s
on the standalone cluster)."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

import pytest

import pipelines.platform.release as release_run
from pipelines.engines.local import LocalEngine
from schemas.base import EngineSettings


class RecordingEngine(LocalEngine):
    """The local engine, recording its warm-ups and whether it was closed."""

    def __init__(self, **options: object) -> None:
        super().__init__()
        self.warmed: list[list[str]] = []
        self.closed = False

    def warm_up(self, modules: list[str]) -> None:
        self.warmed.append(list(modules))

    def close(self) -> None:
        self.closed = True
        super().close()


@dataclass
class Starts:
    """The engines started so far, and the gate that lets a start finish."""

    made: list[RecordingEngine] = field(default_factory=list)
    gate: threading.Event = field(default_factory=threading.Event)


@pytest.fixture
def engines(monkeypatch: pytest.MonkeyPatch) -> Starts:
    starts = Starts()

    def make(name: str, **options: object) -> RecordingEngine:
        starts.gate.wait(10)  # the start finishes only when the test lets it
        starts.made.append(RecordingEngine(**options))
        return starts.made[-1]

    monkeypatch.setattr(release_run, "make_engine", make)
    return starts


def test_start_engine_warms_up_only_while_the_driver_is_busy(engines: Starts) -> None:
    engines.gate.set()
    busy = release_run.start_engine("local", {}, ["pipelines.crowd.blocks"], driver_busy=lambda: True)
    idle = release_run.start_engine("local", {}, ["pipelines.crowd.blocks"], driver_busy=lambda: False)
    assert busy.warmed == [["pipelines.crowd.blocks"]]
    assert idle.warmed == []


def test_a_driver_that_waits_before_the_engine_is_up_gets_no_warm_up(engines: Starts) -> None:
    with release_run.engine_in_background(None, EngineSettings(), "local", None, ["pipelines.crowd.blocks"]) as wait:
        threading.Timer(0.2, engines.gate.set).start()  # type: ignore[attr-defined]
        engine = wait()  # the driver had nothing to do: it waits before the start is done
    assert engine.warmed == [], "a warm-up the release waits behind only adds a job"
    assert engine.closed


def test_a_driver_still_busy_when_the_engine_is_up_gets_the_warm_up(engines: Starts) -> None:
    with release_run.engine_in_background(None, EngineSettings(), "local", None, ["pipelines.crowd.blocks"]) as wait:
        engines.gate.set()
        for _ in range(200):  # the driver's own work, until the engine has started and warmed up
            if engines.made and engines.made[0].warmed:
                break
            threading.Event().wait(0.05)
        engine = wait()
    assert engine.warmed == [["pipelines.crowd.blocks"]]
