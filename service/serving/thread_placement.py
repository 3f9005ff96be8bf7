"""Where a worker's serving threads run: on one core while its calls come one at a time, on
every core it may use once they overlap.

A served call crosses threads that are not the engine's: gRPC's I/O threads read the request
and hand it to the event loop's thread, which answers it (a cheap query runs on the loop
itself) and hands the answer back. Each hand-off wakes a thread, and one asleep on another core
is woken by an interrupt between cores, dear on a virtual machine. A worker that computes on
one thread (`--workers` one per core, the default) with a core of its own
(serve_setup.cores_of_their_own) therefore gathers its serving threads —
every thread but the background compute threads (`compute_threads.compute_thread_ids`), so its
lanes too: one call at a time, a lane computes while the loop waits — onto its own core
(worker i on the i-th core it may use) once `GATHER_AFTER` windows of `WINDOW_S` in a row had
at most `GATHER_AT_MOST` of their calls begin beside another (service/api/grpc/call_overlap.py;
a window without calls counts as quiet), and spreads them over every core again as soon as a
call begins beside another: gathered, the serving threads cannot use more than one core, and
overlapping calls need the other core's time too (kept on one core whatever the load, in a
scratch trial, one connection at 8 and 32 callers lost QPS). The signal is the calls' overlap,
not the CPU the worker uses: one caller at a time keeps a worker's loop nearly as busy as
8 callers do. The background compute threads (version loads, the sketch) keep every core
always, so a load does not take the serving core's time. What it changes:
`python -m benchmarks.service.request_path` (docs/explanation/serving.md).

The decision (`next_placement`) is pure; `ThreadPlacement` reads the counts on the event loop
every window and moves the threads (`place`, Linux's sched_setaffinity).
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from service.engine.compute_threads import compute_thread_ids, process_cores

if TYPE_CHECKING:
    from service.serving.metrics import ServerMetrics

log = logging.getLogger(__name__)

WINDOW_S = 0.1  # how often the counts are read
GATHER_AT_MOST = 0.05  # of a window's calls overlapping, in each of GATHER_AFTER in a row
GATHER_AFTER = 3


@dataclass(frozen=True)
class Placement:
    """Whether the serving threads are gathered on one core, and how many quiet windows in a
    row the worker has had."""

    gathered: bool = False
    quiet: int = 0


def next_placement(placement: Placement, calls: int, overlapped: int) -> Placement:
    """The placement after a window of `calls` calls, `overlapped` of them begun while another
    was in flight (module docstring)."""
    if calls and overlapped / calls > GATHER_AT_MOST:
        return Placement(gathered=False, quiet=0)
    quiet = placement.quiet + 1
    return Placement(gathered=quiet >= GATHER_AFTER, quiet=quiet)


def serving_thread_ids(tasks: Path = Path("/proc/self/task")) -> list[int]:
    """This process's threads that are not compute threads."""
    compute = compute_thread_ids()
    return [int(task.name) for task in tasks.iterdir() if int(task.name) not in compute]


def place(threads: Iterable[int], cores: frozenset[int]) -> None:
    """Let each of `threads` run on `cores` only (a thread that has ended meanwhile is
    skipped)."""
    for thread in threads:
        try:
            os.sched_setaffinity(thread, cores)
        except (ProcessLookupError, PermissionError):
            continue


def gathering_core(worker: int) -> int:
    """The core worker `worker` gathers its threads on: the i-th of the cores the process may
    use (whether it gathers at all is the pool's decision: serve_setup.cores_of_their_own)."""
    cores = sorted(process_cores())
    return cores[worker % len(cores)]


class CallOverlap:
    """Calls begun, those begun while another was in flight, and how many are in flight;
    `on_overlap`, when set, is called as a call begins beside another."""

    def __init__(self) -> None:
        self.calls = 0
        self.overlapped = 0
        self.in_flight = 0
        self.on_overlap: Callable[[], None] | None = None

    def begin(self) -> None:
        self.calls += 1
        if self.in_flight:
            self.overlapped += 1
            if self.on_overlap is not None:
                self.on_overlap()
        self.in_flight += 1

    def end(self, _context: Any = None) -> None:
        self.in_flight -= 1


class ThreadPlacement:
    """Gathers and spreads this process's serving threads by how often the calls counted in
    `overlap` overlap (module docstring), checked every `WINDOW_S` on the event loop it is
    started on."""

    def __init__(self, core: int, overlap: CallOverlap, metrics: ServerMetrics) -> None:
        self.core, self.overlap, self.metrics = core, overlap, metrics
        self.placement = Placement()
        self._handle: asyncio.TimerHandle | None = None
        self._counted = (0, 0)

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self._counted = (self.overlap.calls, self.overlap.overlapped)
        self._handle = loop.call_later(WINDOW_S, self._check, loop)

    def stop(self) -> None:
        """No more checks, and the serving threads on every core again."""
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        self._apply(Placement())

    def observe(self, calls: int, overlapped: int) -> None:
        """Move the threads as a window of `calls`, `overlapped` of them overlapping, calls
        for."""
        self._apply(next_placement(self.placement, calls, overlapped))

    def _apply(self, placement: Placement) -> None:
        if placement.gathered != self.placement.gathered:
            cores = frozenset({self.core}) if placement.gathered else process_cores()
            place(serving_thread_ids(), cores)
            self.metrics.threads_gathered.set(1 if placement.gathered else 0)
            self.metrics.thread_moves.inc()  # gathers and spreads so far
            # gathered, the first call to overlap another spreads them, not the window's end
            self.overlap.on_overlap = self._spread if placement.gathered else None
            log.debug("serving threads on cores %s", sorted(cores))
        self.placement = placement

    def _spread(self) -> None:
        self._apply(Placement())

    def _check(self, loop: asyncio.AbstractEventLoop) -> None:
        counted = (self.overlap.calls, self.overlap.overlapped)
        (calls, overlapped), self._counted = self._counted, counted
        self.observe(counted[0] - calls, counted[1] - overlapped)
        self._handle = loop.call_later(WINDOW_S, self._check, loop)
