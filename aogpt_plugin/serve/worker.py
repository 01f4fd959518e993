"""The engine's thread: it runs steps while there is work, and between two steps the commands the server's
handlers send it (submit a plan, cancel a job, score tokens). The model and the engine are touched by this
thread only; what a job's listener hears reaches the handler's event loop through `call_soon_threadsafe`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import queue
import threading
import time

import torch


class Bridge:
    """A job's listener (engine.Listener) that hands each event to an asyncio queue, tagged with `tag` (the
    choice it belongs to): ("drawn", pairs), ("done", SampleOutput) or ("failed", message)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, events: asyncio.Queue, tag):
        self.loop, self.events, self.tag = loop, events, tag

    def _put(self, event) -> None:
        try:
            self.loop.call_soon_threadsafe(self.events.put_nowait, (self.tag, *event))
        except RuntimeError:  # the loop is closed: the server stopped, nobody waits for it
            pass

    def drawn(self, job, sample, pairs):
        self._put(("drawn", pairs))

    def finished(self, job, sample, output):
        self._put(("done", output))

    def failed(self, job, message):
        self._put(("failed", message))


class Worker:
    """Runs `engine` on its own thread. `call(fn)` runs fn() there between two steps and returns a Future;
    `waiting()` counts the samples submitted and not yet in a slot (the server's queue)."""

    def __init__(self, engine, metrics=None):
        self.engine, self.metrics = engine, metrics
        self._commands: queue.SimpleQueue = queue.SimpleQueue()
        self._wake = threading.Event()
        self._lock = threading.Lock()
        self._submitting = 0  # samples in submit commands not yet run
        self.queue_depth = 0  # samples in the engine's queue, as of the last step boundary
        self._stop = False
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._loop, name="aogpt-engine", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        self._stop = True
        self._wake.set()
        self._thread.join(timeout)

    def call(self, fn) -> concurrent.futures.Future:
        future: concurrent.futures.Future = concurrent.futures.Future()
        self._commands.put((fn, future))
        self._wake.set()
        return future

    def submit(self, plan, listener) -> concurrent.futures.Future:
        """Queue `plan`'s samples; the Future holds its Job."""
        with self._lock:
            self._submitting += plan.config.num_samples

        def submit():
            try:
                return self.engine.submit(plan, listener)
            finally:
                with self._lock:
                    self._submitting -= plan.config.num_samples
                self.queue_depth = self.engine.queued

        return self.call(submit)

    def waiting(self) -> int:
        with self._lock:
            return self._submitting + self.queue_depth

    def _run_commands(self) -> None:
        while True:
            try:
                fn, future = self._commands.get_nowait()
            except queue.Empty:
                return
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(fn())
            except BaseException as e:  # noqa: BLE001 - the caller's to handle
                future.set_exception(e)

    def _loop(self) -> None:
        with torch.inference_mode():
            while not self._stop:
                self._run_commands()
                if self.engine.idle():
                    self._wake.wait(0.5)
                    self._wake.clear()
                    continue
                started = time.perf_counter()
                try:
                    busy = self.engine.step()
                except Exception as e:  # noqa: BLE001 - outside a step's own guard (admission): fail all, go on
                    self.engine.fail_all(f"the engine failed ({type(e).__name__}: {e})")
                    busy = 0
                self.queue_depth = self.engine.queued
                if self.metrics is not None:
                    self.metrics.step(busy, self.engine.busy, self.queue_depth, time.perf_counter() - started)
