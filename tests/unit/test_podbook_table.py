"""The pod book's table itself: a pair it lacks is an error that is logged and counted, every
stage answers every watch event, a preemptor's nomination and a pod's moves in the queue are
the table's events and effects (no other module writes a nomination or moves a pod in the
queue), and docs/architecture.md shows exactly this table (regenerate it with
``python -m tests.unit.test_podbook_table``), every effect and every stage explained."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from scheduler.service.podbook import TABLE, Ctx, Effect, Event, PodBook, Stage, Transition
from scheduler.state.memory import MemoryStore
from tests.builders import MakePod
from tests.clock import ManualClock
from tests.lifecycle import QUICK_RETRIES, Apiserver, Replica, node

SERVICE = Path(__file__).parents[2] / "scheduler" / "service"


async def test_an_event_the_table_does_not_have_is_an_error_logged_and_counted() -> None:
    book = PodBook()
    assert (Stage.GONE, Event.TAKEN) not in TABLE
    assert book.handle("default/p", "u", Event.TAKEN, 0.0) is None
    assert book.unexpected[(Stage.GONE, Event.TAKEN)] == 1
    clock = ManualClock(0.0)
    r = Replica(Apiserver(), MemoryStore(clock), clock)
    r.s.effects.dispatch("default/p", "u", Event.BIND_OK)  # GONE: the table says release the store
    assert r.s.metrics.registry.get_sample_value(
        "scheduler_pod_book_unexpected_events_total", {"stage": "gone", "event": "bind-ok"}
    ) in (None, 0.0)
    r.s.effects.dispatch("default/p", "u", Event.PLACED)
    assert (
        r.s.metrics.registry.get_sample_value(
            "scheduler_pod_book_unexpected_events_total", {"stage": "gone", "event": "placed"}
        )
        == 1.0
    )
    assert r.s.book.entries == {}
    await r.settle()


def test_every_stage_answers_every_watch_event() -> None:
    watch = [Event.PENDING_SEEN, Event.PENDING_LEFT, Event.PENDING_ENDED, Event.BOUND_ENDED]
    for stage in Stage:
        for event in watch:
            assert (stage, event) in TABLE, (stage, event)


# Stages in which an entry may hold a nomination: set while pending, kept while its placement
# is reserved and bound (a Binding may fail), ended when the table moves it to assumed, bound or
# gone (effect end-nomination).
NOMINATION_STAGES = (
    Stage.PENDING,
    Stage.UNSETTLED,
    Stage.RELOADED,
    Stage.RESERVING,
    Stage.BINDING,
)
NOMINATION_ENDS = (Event.NOMINATION_ENDED, Event.NOMINATION_EXPIRED, Event.NOMINATION_RESET)


def test_a_nomination_ends_by_the_table_in_every_stage_that_may_hold_one() -> None:
    for stage in NOMINATION_STAGES:
        for event in NOMINATION_ENDS:
            assert TABLE[(stage, event)][0] is stage, (stage, event)  # the pod stays where it is
            effects = TABLE[(stage, event)][1]
            ends = Effect.END_NOMINATION in effects or Effect.FORGET_NOMINATION in effects
            assert ends, (stage, event)
    for stage in Stage:
        if stage not in NOMINATION_STAGES:
            for event in (Event.NOMINATED, *NOMINATION_ENDS):
                assert (stage, event) not in TABLE, (stage, event)
    for (stage, _), (new, effects) in TABLE.items():
        if stage in NOMINATION_STAGES and new not in NOMINATION_STAGES:
            assert Effect.END_NOMINATION in effects, (stage, new)  # nothing of it stays held
    # Only a pending pod gets one, or searches.
    for event in (Event.NOMINATED, Event.SEARCHED):
        assert {s for s, e in TABLE if e is event} == {Stage.PENDING, Stage.RELOADED}


def test_the_queue_moves_are_the_tables() -> None:
    """Every move of a pod in the queue is an effect of a cell; the queue's own events reach
    every stage (a crash or a victim's departure may find the pod anywhere) and move only a
    pending pod."""
    for event in (Event.CRASHED, Event.VICTIMS_GONE):
        for stage in Stage:
            new, effects = TABLE[(stage, event)]
            pending = stage in (Stage.PENDING, Stage.RELOADED)
            assert new is stage and bool(effects) is pending, (stage, event)
    assert TABLE[(Stage.PENDING, Event.TAKEN)] == (Stage.PENDING, (Effect.TAKE,))
    for stage in (Stage.PENDING, Stage.RELOADED):
        assert TABLE[(stage, Event.ELECTED)] == (stage, (Effect.ENQUEUE,))
        assert TABLE[(stage, Event.NOT_READY)] == (stage, (Effect.BACKOFF,))
        assert TABLE[(stage, Event.VICTIMS_GONE)] == (stage, (Effect.ACTIVATE,))


# What writes a nomination (the entry's, the book's index, the snapshot's) or a search, and what
# moves a pod in the queue. Preemption writes the store's copy before it tells the book; the
# loop pops; the retry of every waiting pod after a node or a budget changed is no pod's move.
_NOMINATION_WRITE = re.compile(
    r"\.(nomination|searched)\s*=[^=]|(state|book)\.(nominate|unnominate)\("
)
_QUEUE_MOVE = re.compile(r"queue\.(add|delete|done|take|backoff|activate|unschedulable|retry)\(")


@pytest.mark.parametrize("path", sorted(SERVICE.glob("*.py")), ids=lambda p: p.name)
def test_only_the_table_writes_nominations_and_moves_pods_in_the_queue(path: Path) -> None:
    source = path.read_text()
    if path.name not in ("effects.py", "podbook.py"):
        assert not _NOMINATION_WRITE.findall(source), "a nomination written outside the table"
    if path.name != "effects.py":
        assert not _QUEUE_MOVE.findall(source), "a pod moved in the queue outside the table"


def record(r: Replica) -> list[tuple[str, Event, Stage]]:
    """Every transition of ``r``'s book: (pod, event, new stage)."""
    seen: list[tuple[str, Event, Stage]] = []
    dispatch = r.s.effects.dispatch

    def spy(key: str, uid: str, event: Event, ctx: Ctx | None = None) -> Transition | None:
        t = dispatch(key, uid, event, ctx)
        if t is not None:
            seen.append((key, event, t.new))
        return t

    r.s.effects.dispatch = spy  # type: ignore[method-assign]
    return seen


async def test_a_preemptor_s_nomination_and_its_queue_moves_are_book_events() -> None:
    """A nomination is set, waits for its victims, activates the preemptor when the last one
    leaves and ends when it binds: each step a transition of the book."""
    clock = ManualClock(0.0)
    r = Replica(Apiserver(), MemoryStore(clock), clock, tuning=QUICK_RETRIES)
    seen = record(r)
    await r.elect([node(1)])
    low = r.api.create(MakePod().Name("low").Req(1).Bound("n", "0").Obj())
    r.s.intake.bound_event("ADDED", low)
    r.pending(MakePod().Name("big").Req(1).Priority(1000).Obj())
    while await r.step() is not None:
        pass
    await r.settle()
    big = [(e, stage) for key, e, stage in seen if key == "default/big"]
    assert big == [
        (Event.PENDING_SEEN, Stage.PENDING),
        (Event.TAKEN, Stage.PENDING),
        (Event.SEARCHED, Stage.PENDING),  # the search found a victim: no quiet time
        (Event.NOMINATED, Stage.PENDING),  # written to the store first
        (Event.NOT_PLACED, Stage.PENDING),
    ]
    assert r.s.book.nominated == {"default/big"}
    assert "default/big" in r.s.state.nominations
    seen.clear()
    r.s.intake.bound_event("DELETED", r.api.delete("default/low"))  # the victim leaves
    await r.settle()
    assert ("default/big", Event.VICTIMS_GONE, Stage.PENDING) in seen
    assert r.s.queue.counts()["active"] == 1  # at once, backoff or not
    while await r.step() is not None:
        pass
    await r.settle()
    assert ("default/big", Event.BIND_OK, Stage.ASSUMED) in seen  # end-nomination
    assert r.s.book.nominated == set() and r.s.state.nominations == {}
    assert await r.store.nominations(0) == {}


async def test_an_expired_nomination_is_a_book_event_that_clears_every_copy() -> None:
    clock = ManualClock(0.0)
    r = Replica(Apiserver(), MemoryStore(clock), clock, tuning=QUICK_RETRIES)
    await r.elect([node(1)])
    low = r.api.create(MakePod().Name("low").Req(1).Bound("n", "0").Obj())
    r.s.intake.bound_event("ADDED", low)
    r.pending(MakePod().Name("big").Req(1).Priority(1000).Obj())
    while await r.step() is not None:
        pass
    await r.settle()
    assert r.api.nominated == {"default/big": "n"}
    seen = record(r)
    while clock.now < 301:
        clock.now += 5.0
        await r.renew()
    assert r.s.preemptions.tick()  # waiting pods retry: the GPUs went back
    await r.settle()
    assert seen == [("default/big", Event.NOMINATION_EXPIRED, Stage.PENDING)]
    assert r.s.book.nominated == set() and r.s.state.nominations == {}
    assert r.api.nominated == {}
    assert await r.store.nominations(int(clock.now * 1000)) == {}


def render_table() -> str:
    """TABLE as docs/architecture.md shows it: a row per event, a column per stage; a cell is
    the next stage (``=``: unchanged) and its effects joined by ``+``; ``·``: not in the table."""
    lines = [
        "| event \\ stage | " + " | ".join(s.value for s in Stage) + " |",
        "|---|" + "---|" * len(Stage),
    ]
    for event in Event:
        cells = []
        for stage in Stage:
            step = TABLE.get((stage, event))
            if step is None:
                cells.append("·")
                continue
            new, effects = step
            words = ["=" if new is stage else new.value]
            if effects:
                words.append("+".join(e.value for e in effects))
            cells.append(" ".join(words))
        lines.append(f"| {event.value} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def test_the_documented_table_is_the_codes_table_with_every_effect() -> None:
    doc = (Path(__file__).parents[2] / "docs" / "architecture.md").read_text()
    assert render_table() in doc, "regenerate: python -m tests.unit.test_podbook_table"
    for effect in Effect:
        assert f"`{effect.value}`" in doc, f"effect {effect.value} is not explained"
    for stage in Stage:
        assert f"| {stage.value} |" in doc, f"stage {stage.value} is not explained"


if __name__ == "__main__":
    print(render_table(), end="")
