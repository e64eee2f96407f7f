"""The worker loop of the local backend (runs in a spawned / forkserver process).

A worker owns one model, built once by ``model_factory()``. It reads its coded
inputs from a slot of the shared input segment, writes ``f(inputs)`` into its
slot of the shared output segment, and tells the master: through the shared
control words for an answer to the master's current round (below), with a
message of a few bytes otherwise. Every answer carries the round id it answers.
Building the model, the simulated sleep and the chunk loop are
letcc.runtime.worker_common's, shared with the Ray actor.

Tasks are records in the shared control words, not messages: the master
writes one record per worker it hands a round to and wakes them all with one
futex call (csrc/control_words.hpp, csrc/task_doorbell.hpp; a worker sleeps
in ``letcc._core.WorkerPort.next`` with the GIL released). Everything else
goes through a duplex pipe per worker (Connection's framing,
letcc.runtime.frames; done and cancelled are fixed binary structs,
letcc.runtime.messages, the rest pickled tuples). master -> worker, each
followed by a bump of the worker's mail counter and a ring, so a worker reads
its pipe before any task posted after the message:
    ("layout", in_spec, out_spec|None)      attach new segments (shapes changed)
    ("probe", round, b)                     compute row 0 only, report its shape
    ("stop",)
worker -> master:
    ("ready", pid) | ("init_error", traceback)
    done (round) | cancelled (round) | ("error", round, traceback)
    ("shape", round, shape, dtype, rows)    output does not match the layout
    ("probe", round, shape, dtype)

Rounds in flight: the segments have R regions (ring slots, shm_slots) and
there is one task record per (ring slot, worker); a task names its input slot
in its region and its output goes to the worker's own slot of that region. A
worker takes the oldest new record first (the order the rounds were posted)
and drops tasks no longer wanted. A record rewritten before its worker took
it (its ring slot reused by a later round: the earlier one had ended) is
never run; the master acknowledges every task up to the round a reply names.

Control words (int64; R = ring slots, 1 for CodedInference; the C++ side is
csrc/control_words.hpp, ControlWords, and must agree):
    ctl[k*N + rank]        the round the master still wants from this worker in
                           region k (-1: none); checked before a task starts,
                           between chunks and while sleeping (simulate="sleep"),
                           so a cancelled task is dropped at the next chunk
                           boundary instead of delaying the tasks behind it
    ctl[R*N + rank]        input slot for the next probe (region 0)
    ctl[(R+1)*N + rank]    the last round this worker finished
    ctl[(R+2)*N + rank]    when (float64 perf_counter)
    ctl[(R+3)*N]           the round counter; ctl[(R+3)*N + 1] the doorbell target
    ctl[(R+3)*N + 2 + rank] this worker's mail counter (STOP: shut down)
    ctl[(R+4)*N + 2]       the task doorbell (a futex in its low 32 bits)
    ctl[(R+4)*N + 3 ...]   the task records, 5 words per (ring slot, worker)

Answers: "done" for the round the master submitted last is not a message. The
worker writes the time and the round into its two words above, then adds one
to the round's counter (compare-and-swap, only while it still holds that
round); the worker whose answer brings the count to the master's target
writes one byte to the doorbell pipe (all in WorkerPort.done). The master
so sleeps until the answers it needs are in (LocalBackend.arm) rather than
waking once per answer. A done for any other round (an older round still in
flight, or one the master has left) goes as a message, like the rest.

Idle workers sleep in the kernel (no spinning by default: on a machine with
fewer cores than workers a spinning worker takes the core the master or a
busy worker needs; LETCC_WORKER_SPIN_US sets a spin before each sleep, for
machines with a core per worker).
"""
from __future__ import annotations

import os
import pickle
import signal
import sys
import threading
import time
import traceback
from typing import NamedTuple

import numpy as np

from letcc import _core
from letcc.runtime.frames import FrameReader, frame, write_all
from letcc.runtime.messages import reply_frame
from letcc.runtime.shm_slots import attach
from letcc.runtime.worker_common import (become_worker, limit_threads, prepare_model, run_chunks,
                                         sleep_unless_cancelled, worker_rank)

__all__ = ["worker_main", "worker_rank", "prepare_model"]

STOP = _core.STOP               # ctl value: shut down
OWN_SLOT = _core.OWN_SLOT       # a task's input slot: the worker's own rank
# what WorkerPort.next returns when it is not a task
_MAIL, _STOPPED, _TIMEOUT = 1, 2, 3
# a worker with nothing to do wakes this often to look at its pipe (EOF: the
# master is gone without a stop; the lifeline usually says so first)
_IDLE_CHECK_S = 1.0


def control_words(n_workers: int, ring: int = 1) -> int:
    """Size of the shared control array for N workers and `ring` ring slots
    (layout: module docstring)."""
    return int(_core.control_words(n_workers, ring))


def spin_seconds() -> float:
    """How long an idle worker spins before it sleeps (LETCC_WORKER_SPIN_US,
    default 0; the module docstring says why)."""
    raw = os.environ.get("LETCC_WORKER_SPIN_US", "0")
    try:
        us = float(raw)
    except ValueError:
        raise ValueError(f"LETCC_WORKER_SPIN_US must be a number of microseconds, got {raw!r}") from None
    if not us >= 0 or us == float("inf"):
        raise ValueError(f"LETCC_WORKER_SPIN_US must be finite and >= 0, got {raw!r}")
    return us * 1e-6


class ControlLayout(NamedTuple):
    """Views of the shared control array (layout: module docstring), read the
    same way by the master and every worker."""
    n: int                  # workers
    wanted: np.ndarray      # int64 [R, N]: the round the master wants from each worker, per ring slot
    slots: np.ndarray       # int64 [N]: each worker's input slot
    done_round: np.ndarray  # int64 [N]: the last round each worker finished
    done_time: np.ndarray   # float64 [N]: when (perf_counter)
    counter_word: int       # the round counter (round_counter.hpp)
    bell_word: int          # the count at which a finishing worker rings the doorbell
    mail: np.ndarray        # int64 [N]: mail counters (a message waits in the pipe)
    records: np.ndarray     # int64 [R, N, 5]: the task records


def control_layout(ctl: np.ndarray, ring: int = 1) -> ControlLayout:
    """The views of `ctl`, a flat int64 array of control_words(N, ring) words."""
    n = (ctl.shape[0] - 3) // (6 * ring + 4)
    if ctl.shape[0] != control_words(n, ring):
        raise ValueError(f"a control array of {ctl.shape[0]} words fits no number of workers with {ring} ring slots")
    w = ring * n
    tail = w + 3 * n
    return ControlLayout(n, ctl[:w].reshape(ring, n), ctl[w:w + n], ctl[w + n:w + 2 * n],
                         ctl[w + 2 * n:tail].view(np.float64), tail, tail + 1, ctl[tail + 2:tail + 2 + n],
                         ctl[tail + n + 3:].reshape(ring, n, 5))


def reset_control(ctl: np.ndarray, ring: int = 1) -> ControlLayout:
    """A fresh control array (the master, before any worker starts): nothing
    wanted, identity probe slots, no task posted, no round finished."""
    words = control_layout(ctl, ring)
    ctl[:] = 0
    words.wanted[:] = -1
    words.slots[:] = np.arange(words.n)
    words.done_round[:] = -1
    words.records[:] = -1
    return words


class _Worker:
    def __init__(self, rank, conn, bell, ctl_spec, call, ring, spin):
        self.rank = rank
        self.conn = conn                # kept open; read and written through its fd
        self.fd = conn.fileno()
        self.reader = FrameReader(self.fd)
        self.bell = bell.fileno()
        os.set_blocking(self.bell, False)   # a full doorbell has rung already
        self.ctl_mem = attach(ctl_spec)
        self.ctl = ctl = self.ctl_mem.slot(0, 1).reshape(-1)   # int64, layout: module docstring
        words = control_layout(ctl, ring)
        self.n = words.n
        self.slot_word = ring * words.n + rank
        self.port = _core.WorkerPort(ctl, words.n, ring, rank, self.bell)
        self.spin = float(spin)
        self.call = call
        self.inp = None
        self.out = None
        # per (rows per slot b, input slot): (input rows, output rows, output row
        # shape, dtype), built once per layout instead of on every task
        self._views: dict = {}
        self._castable: dict = {}       # model output dtype -> fits the output slots

    def layout(self, in_spec, out_spec) -> None:
        self._views.clear()             # drop the views before unmapping what they show
        self._castable.clear()
        for mem in (self.inp, self.out):
            if mem is not None:
                mem.close()
        self.inp = self.out = None
        try:
            self.inp = attach(in_spec)
            self.out = attach(out_spec) if out_spec is not None else None
        except FileNotFoundError:
            # superseded by a newer layout whose message follows in the pipe
            self.inp = self.out = None

    def task(self, r: int, b: int, sleep_s: float, chunk_rows: int | None, slot: int, ring: int) -> tuple:
        port = self.port
        if slot == OWN_SLOT:
            slot = self.rank

        def wanted():
            return port.wanted(ring) == r

        def nap(left):
            # wake early when the doorbell rings for this worker (a new round,
            # mail, stop: the master may have moved on); a ring with the round
            # still wanted (a task posted behind this one, rounds in flight) is
            # nothing to wake for: sleep the slice out instead of spinning
            if port.nap(min(left, 0.02)) and wanted():
                time.sleep(min(left, 0.02))

        if not wanted() or self.inp is None or self.out is None:
            return ("cancelled", r)
        if sleep_s > 0 and not sleep_unless_cancelled(sleep_s, wanted, nap):
            return ("cancelled", r)
        key = (b, slot, ring)
        views = self._views.get(key)
        if views is None:
            if slot < 0:
                return ("cancelled", r)     # no input was encoded for this worker
            spec = self.out.spec
            views = self._views[key] = (self.inp.slot(slot, b, ring), self.out.slot(self.rank, b, ring),
                                        tuple(spec.row_shape), np.dtype(spec.dtype))
        x, y_slot, row_shape, out_dtype = views

        def store(start, stop, y):
            return self.store_checked(r, y_slot, row_shape, out_dtype, y, start, stop)

        stopped = run_chunks(self.call, x, chunk_rows, wanted, store)
        if stopped is not None:
            return ("cancelled", r) if stopped == "cancelled" else stopped
        # no last check of ctl: a stale "done" is harmless (the master drops it by
        # round id; this slot is read only after this worker reports the current round)
        return ("done", r)

    def probe(self, r: int, b: int) -> tuple:
        slot = int(self.ctl[self.slot_word])
        if self.inp is None or slot < 0:
            return ("cancelled", r)
        y = self.call(self.inp.slot(slot, b)[:1])
        return ("probe", r, tuple(y.shape), y.dtype.str)

    def quick(self, r: int, b: int, slot: int, ring: int) -> bool | None:
        """The usual task (no sleep, one call, views built, output of the
        layout's shape and dtype) with nothing around the model call; True:
        answered, False: the master can no longer be told, None: not the
        usual case (task() takes it, from the start: nothing was done)."""
        views = self._views.get((b, self.rank if slot == OWN_SLOT else slot, ring))
        if views is None or self.port.wanted(ring) != r:
            return None
        x, y_slot, row_shape, out_dtype = views
        try:
            y = self.call(x)
        except Exception:
            return self.send(r, ("error", r, traceback.format_exc()))
        if y.dtype != out_dtype or y.shape != y_slot.shape:
            bad = self.store_checked(r, y_slot, row_shape, out_dtype, y)
            if bad is not None:
                return self.send(r, bad)
        else:
            y_slot[...] = y
        return self.port.done(r) or self.send(r, ("done", r))

    def store_checked(self, r, y_slot, row_shape, out_dtype, y, start=0, stop=None):
        """Write y into y_slot[start:stop] if it fits the layout (a castable
        dtype, the rows' shape); else the "shape" reply."""
        stop = y_slot.shape[0] if stop is None else stop
        castable = self._castable.get(y.dtype)
        if castable is None:
            castable = self._castable[y.dtype] = bool(np.can_cast(y.dtype, out_dtype, casting="same_kind"))
        if not castable or y.shape != (stop - start,) + row_shape:
            return ("shape", r, tuple(y.shape), y.dtype.str, stop - start)
        y_slot[start:stop] = y
        return None

    def loop(self) -> None:
        port, spin, quick = self.port, self.spin, self.quick
        if not self.mail():                 # what was sent before this worker could be told
            return
        while True:
            got = port.next(_IDLE_CHECK_S, spin)
            if type(got) is tuple:          # the hot path: a task record
                r, b, sleep_s, chunk_rows, slot, ring = got
                done = quick(r, b, slot, ring) if sleep_s == 0 and chunk_rows is None else None
                if done is None:
                    done = self.reply(r, self.task, got)
                if not done:
                    return
            elif got == _MAIL or got == _TIMEOUT:
                if not self.mail():
                    return
            else:                           # _STOPPED
                return

    def mail(self) -> bool:
        """Handle every message waiting in the pipe; False: stop (or the master is gone)."""
        reader = self.reader
        try:
            while reader.poll(0):
                msg = pickle.loads(reader.recv())
                kind = msg[0]
                if kind == "stop":
                    return False
                if kind == "layout":
                    self.layout(msg[1], msg[2])
                elif not self.reply(msg[1], self.probe, msg[1:]):     # ("probe", round, b)
                    return False
        except (EOFError, OSError):
            return False                    # master gone
        return True

    def reply(self, r: int, handler, args) -> bool:
        """Run handler(*args) for round r and tell the master; False when the
        master can no longer be told."""
        try:
            reply = handler(*args)
        except Exception:
            reply = ("error", r, traceback.format_exc())
        if reply[0] == "done" and self.port.done(r):
            return True
        return self.send(r, reply)

    def send(self, r: int, reply: tuple) -> bool:
        """Send a reply for round r as a message; False when the master can no longer be told."""
        try:
            if reply[0] in ("done", "cancelled"):
                write_all(self.fd, reply_frame(reply[0], r))
            else:                           # plain pickle in Connection's framing (frames.py)
                write_all(self.fd, frame(pickle.dumps(reply, pickle.HIGHEST_PROTOCOL)))
        except (BrokenPipeError, OSError):
            return False
        return True

    def close(self) -> None:
        self._views.clear()
        self.port.release()
        for mem in (self.inp, self.out, self.ctl_mem):
            if mem is not None:
                mem.close()
        self.ctl = None


def _exit_when_master_dies(lifeline) -> None:
    """Daemon thread: the master holds the only write end of `lifeline` and never
    writes; EOF means it is gone (SIGKILL, crash). A worker stuck in a model call
    would never read the EOF of its task pipe, and its parent (the fork server)
    stays alive as long as any worker does, so neither can tell us."""
    try:
        lifeline.poll(None)
    except (OSError, EOFError):
        pass
    os._exit(3)


def _precise_timers() -> None:
    """Linux: a timer slack of 1 ns for this process (prctl PR_SET_TIMERSLACK).
    The default 50 us let every simulated straggler sleep (simulate="sleep")
    end late: 152 us past the deadline (median) with select() here, 86 us
    with 1 ns, and what a round waits for is the (N-S)-th of those sleeps.
    Nothing else in a worker sleeps on a timer."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(29, 1, 0, 0, 0)    # PR_SET_TIMERSLACK
    except (OSError, AttributeError):
        pass


def _batch_scheduling() -> None:
    """Opt-in (LETCC_WORKER_SCHED_BATCH=1, Linux): SCHED_BATCH workers do not preempt
    the master on its core when its task message wakes them, which saves context
    switches while the master dispatches. Off by default: on a shared, loaded
    machine batch-scheduled workers lose CPU to everything else and rounds got
    slower in measurements here (bench/runtime_overhead.py)."""
    if os.environ.get("LETCC_WORKER_SCHED_BATCH", "0") != "1":
        return
    if hasattr(os, "sched_setscheduler") and hasattr(os, "SCHED_BATCH"):
        try:
            os.sched_setscheduler(0, os.SCHED_BATCH, os.sched_param(0))
        except OSError:
            pass


def worker_main(rank: int, conn, lifeline, bell, ctl_spec, model_factory, device: str, threads: int | None,
                ring: int, spin: float) -> None:
    """Process entry point: build the model, say ready, serve tasks until stop/EOF.
    spin: seconds an idle worker spins before it sleeps (the master's
    spin_seconds(), read there: a forkserver's child sees the environment
    the forkserver started with)."""
    # Ctrl-C goes to the whole process group: the master handles it and stops us.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    become_worker(rank)
    _precise_timers()
    _batch_scheduling()
    threading.Thread(target=_exit_when_master_dies, args=(lifeline,), daemon=True,
                     name="letcc-lifeline").start()
    try:
        limit_threads(threads)
        model = model_factory()
        call, _ = prepare_model(model, device)
        limit_threads(threads)      # the factory may have imported torch just now
    except BaseException:
        try:
            conn.send(("init_error", traceback.format_exc()))
        except OSError:
            pass
        return
    worker = _Worker(rank, conn, bell, ctl_spec, call, ring, spin)
    try:
        conn.send(("ready", os.getpid()))
        worker.loop()
    except (BrokenPipeError, OSError):
        pass
    finally:
        worker.close()
