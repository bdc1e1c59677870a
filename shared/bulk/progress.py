"""Progress of the sending Spark job on the console: its tasks (partitions) done out of all,
and how many task attempts failed (Spark retries them), read from Spark's status tracker
while the job runs. Rows are counted when the job ends: a Python task reports only then."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from pyspark import SparkContext

from shared.terminal import ProgressBar

POLL_SECONDS = 0.5


@contextmanager
def job_progress(
    context: SparkContext, group: str, label: str, tasks: int, *, enabled: bool | None
) -> Iterator[None]:
    """Runs the body's Spark actions in job group ``group``, drawing the tasks of its last
    stage (the one that sends) until the body ends."""
    context.setJobGroup(group, label)
    stop = threading.Event()
    with ProgressBar(label, tasks, enabled=enabled) as bar:
        watch = _Watch(context, group, bar)
        watcher = threading.Thread(target=watch.run, args=(stop,), daemon=True)
        watcher.start()
        try:
            yield
        finally:
            stop.set()
            watcher.join()
            watch.draw()
    context.setLocalProperty("spark.jobGroup.id", "")


class _Watch:
    def __init__(self, context: SparkContext, group: str, bar: ProgressBar) -> None:
        self.context, self.group, self.bar = context, group, bar
        self.done = 0

    def run(self, stop: threading.Event) -> None:
        while not stop.wait(POLL_SECONDS):
            self.draw()

    def draw(self) -> None:
        tracker = self.context.statusTracker()
        stages: list[int] = []
        for job_id in tracker.getJobIdsForGroup(self.group):
            job = tracker.getJobInfo(job_id)
            if job is not None:
                stages += list(job.stageIds)
        stage = tracker.getStageInfo(max(stages)) if stages else None
        if stage is None or stage.numCompletedTasks <= self.done:
            return
        failed = stage.numFailedTasks
        note = f"{failed} failed task attempts, retried" if failed else ""
        self.bar.advance(stage.numCompletedTasks - self.done, note=note)
        self.done = stage.numCompletedTasks
