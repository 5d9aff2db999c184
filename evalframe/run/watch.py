"""Watch mode (`watch.every=60s`): judge an experiment's traces as they arrive, tick after tick, until
stopped (Ctrl-C, SIGTERM) or `watch.ticks` ticks have run.

Each tick asks the store which traces ended since the checkpoint (and from further back, within
`watch.lookback`, when a trace stored late has no verdict yet), judges those that have settled
(evalframe.run.tick: the pipeline on that window, oldest first, under the models' rate limits), writes
their verdicts back, logs its figures at its step of the watcher's one MLflow run, moves the checkpoint
(kept in that run's tags: evalframe.tracking.watcher) and prints one line. A watcher killed at any point
and started again with the same config continues the same run: the checkpoint says where, a tick under
way at the kill is resumed from its journal, and the verdicts on the traces keep any trace from being
judged twice even when the checkpoint is lost.
"""

from __future__ import annotations

import signal
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

from evalframe.data import watching
from evalframe.errors import EXIT_OK
from evalframe.report import console as report
from evalframe.results.journal import fingerprint
from evalframe.run import tick as ticks
from evalframe.tracking import sweeps, watcher

Clock = Callable[[], float]


def key(config: Mapping[str, Any]) -> str:
    """What makes two watchers the same: the config's fingerprint (the dataset, target, scorers and
    judges), the watch node left out, so a watcher started again with another `every` or `ticks` goes on."""
    return fingerprint({k: v for k, v in config.items() if k != "watch"})


def main(
    config: Mapping[str, Any],
    output_dir: Path,
    clock: Clock = time.time,
    sleep: Callable[[float], None] = time.sleep,
) -> int:
    """Watch until stopped; the exit code (0 after a clean stop, by Ctrl-C, SIGTERM or watch.ticks)."""
    settings = watching.of(config)
    assert settings is not None, "watch.every is set"
    run = watcher.open_run(config, key(config), f"watch-{sweeps.run_name(config)}")
    _started(run, config, settings)
    done = 0
    with _terminated_as_interrupt():
        try:
            while settings.ticks is None or done < settings.ticks:
                if done:
                    sleep(settings.every)
                _tick(run, config, settings, output_dir, clock)
                done += 1
        except KeyboardInterrupt:
            print(
                "stopped: every finished verdict is on its trace or in its tick's journal; the same "
                "command continues where this one stopped",
                file=sys.stderr,
            )
        finally:
            _quietly(run.stop)
    return EXIT_OK


def _tick(
    run: watcher.WatcherRun,
    config: Mapping[str, Any],
    settings: watching.Watch,
    output_dir: Path,
    clock: Clock,
) -> None:
    """One tick: the one under way at the last stop (its window and journal), else the traces that
    settled since the checkpoint. The checkpoint moves only once the tick's verdicts are written."""
    checkpoint, now = run.checkpoint, clock()
    if checkpoint.tick:
        from_ms, to_ms = int(checkpoint.tick["from_ms"]), int(checkpoint.tick["to_ms"])
        directory, resume = Path(checkpoint.tick["dir"]), Path(checkpoint.tick["dir"]).is_dir()
    else:
        from_ms, to_ms = settings.window(checkpoint.done_ms, now)
        from_ms = min(from_ms, _late(config, settings, checkpoint.done_ms, now) or from_ms)
        directory, resume = output_dir / f"tick-{checkpoint.step:06d}", False
    tick = ticks.Tick()
    if watcher.ended(config["dataset"], config["tracking"], from_ms, to_ms):
        checkpoint.tick = {"dir": str(directory.resolve()), "from_ms": from_ms, "to_ms": to_ms}
        run.save()  # before any judging: a kill from here on resumes this tick
        tick = ticks.run(ticks.windowed(config, from_ms, to_ms), directory, run.run_id, resume)
    waiting = watcher.ended(config["dataset"], config["tracking"], to_ms, int(now * 1000) + 1)
    run.log_tick(checkpoint.step, tick.metrics(waiting))
    checkpoint.done_ms, checkpoint.step, checkpoint.tick = to_ms, checkpoint.step + 1, {}
    run.save()
    for note in tick.notes:
        print(note, file=sys.stderr)
    print(_line(checkpoint.step - 1, now, tick, waiting), flush=True)


def _late(config: Mapping[str, Any], settings: watching.Watch, checkpoint_ms: int, now: float) -> int | None:
    """Where the tick's window starts to take the traces stored after the checkpoint passed their end
    (within the lookback) that carry no verdict of the tick's settings; None: there is none."""
    late = settings.late(checkpoint_ms, now)
    if late is None or not config["tracking"].get("feedback", True):  # no verdict says what was taken
        return None
    return watcher.earliest_unjudged(config["dataset"], config["tracking"], *late, ticks.digests(config))


def _line(step: int, now: float, tick: ticks.Tick, waiting: int) -> str:
    """The console's line for a tick: when, what was judged, skipped and left to settle, the means."""
    when = datetime.fromtimestamp(now).strftime("%H:%M:%S")
    line = (
        f"tick {step} at {when}: {tick.judged} judged, {tick.skipped} skipped (judged before), "
        f"{waiting} waiting to settle"
    )
    scored = [f"{name} {mean:.3f}" for name, mean in tick.means.items() if mean == mean]
    unscored = sum(tick.unscored.values())
    said = f"; {unscored} unscored" if unscored else ""
    if tick.unjudgeable:
        said += f" ({tick.unjudgeable} {'trace' if tick.unjudgeable == 1 else 'traces'} cannot be judged)"
    return line + (f"; {', '.join(scored)}" if scored else "") + said


def _started(run: watcher.WatcherRun, config: Mapping[str, Any], settings: watching.Watch) -> None:
    experiment = config["dataset"].get("experiment")
    again = f", continuing at tick {run.checkpoint.step}" if run.continued else ""
    print(
        f"watching the traces of {experiment!r} every {settings.every:g} s (a trace is judged "
        f"{settings.settle:g} s after its end){again}; Ctrl-C stops",
        file=sys.stderr,
    )
    report.where_to_look(str(config["tracking"]["uri"]), watcher.where(run), run.experiment_id, run.run_id)


@contextmanager
def _terminated_as_interrupt() -> Iterator[None]:
    """SIGTERM stops the watcher as Ctrl-C does (between or during ticks, finished verdicts kept); only
    in the main thread, where Python lets a handler be set."""

    def interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    try:
        previous = signal.signal(signal.SIGTERM, interrupt)
    except ValueError:  # not the main thread (a test's thread, an embedding program)
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _quietly(step: Callable[[], None]) -> None:
    try:
        step()
    except Exception as e:  # the store gone at the very end: the checkpoint is saved already
        print(
            f"warning: the watcher's MLflow run could not be marked finished ({type(e).__name__})",
            file=sys.stderr,
        )
