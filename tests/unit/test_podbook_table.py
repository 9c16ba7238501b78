"""The pod book's table itself: a pair it lacks is an error that is logged and counted, every
stage answers every watch event, and docs/architecture.md shows exactly this table (regenerate
it with ``python -m tests.unit.test_podbook_table``), every effect and every stage explained."""

from __future__ import annotations

from pathlib import Path

from scheduler.service.podbook import TABLE, Effect, Event, PodBook, Stage
from scheduler.state.memory import MemoryStore
from tests.clock import ManualClock
from tests.lifecycle import Apiserver, Replica


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
