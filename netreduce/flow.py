"""Running the open flow's tools (``netreduce build``, :mod:`netreduce.synth`): a step that says where it is
while it runs and can be given up on (``run_step``), and the watch that tells a router2 that will not route
(``router_diverges``). No hardware library is loaded here, so that the command line parses its arguments
without one."""

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

__all__ = ["PROGRESS_SECONDS", "GaveUp", "run_step", "router_diverges", "router_log_diverges", "DIVERGED_FLOOR",
           "DIVERGED_ITERATIONS", "DIVERGED_RATIO", "STALLED_ITERATIONS", "NEAR_STALLED_ITERATIONS"]

PROGRESS_SECONDS = 60      # how often a long step says where it is when the output is not a terminal

# router2 logs each iteration's overused wires. On a congested design they fall to a lowest count and then
# rise for good or stay (docs/ARCHITECTURE.md, "Boards": no run seen to do either came back), so the watch
# (``router_log_diverges``: ``netreduce build``'s and :func:`synth_ecp5`'s) stops it once the count is
# DIVERGED_RATIO times its lowest, DIVERGED_ITERATIONS iterations or more after it, or has not gone lower for
# STALLED_ITERATIONS. Below DIVERGED_FLOOR wires at its lowest the counts wander on their way to 0 (4, 2, 4: a
# run that routed went 24 iterations without a new lowest): there the rise that stops it is to DIVERGED_RATIO
# times DIVERGED_FLOOR (two runs that never routed fell to 59 and 50 wires and climbed past 150 on their way to
# hundreds and thousands; none of the five that routed whose logs were kept climbed so after its lowest), and the stall
# NEAR_STALLED_ITERATIONS (a run that never routed fell to 3 wires and wandered, below 100, for the 289
# iterations it was watched).
ROUTER_ITERATION = re.compile(r"\biter=(\d+)\s+wires=\d+\s+overused=(\d+)")
DIVERGED_FLOOR, DIVERGED_ITERATIONS, DIVERGED_RATIO, STALLED_ITERATIONS = 100, 10, 1.5, 25
NEAR_STALLED_ITERATIONS = 100


class GaveUp(Exception):
    """A step stopped by its ``give_up`` check (``run_step``); the message says why."""


def router_diverges(log_text):
    """Why router2 will not route, from its log so far (``iter=N wires=W overused=K`` lines), or None: its
    overused wires, ``DIVERGED_ITERATIONS`` iterations or more after their lowest, are ``DIVERGED_RATIO`` times
    that lowest or more, or times ``DIVERGED_FLOOR`` where the lowest was below it; or none has been lower for
    ``STALLED_ITERATIONS``, or for ``NEAR_STALLED_ITERATIONS`` where the lowest was below ``DIVERGED_FLOOR``."""
    best = last = None
    for match in ROUTER_ITERATION.finditer(log_text):
        iteration, overused = int(match[1]), int(match[2])
        if best is None or overused < best[1]:
            best = (iteration, overused)
        last = (iteration, overused)
    if best is None:
        return None
    near = best[1] < DIVERGED_FLOOR
    if last[0] - best[0] >= DIVERGED_ITERATIONS and last[1] >= DIVERGED_RATIO * max(best[1], DIVERGED_FLOOR):
        return (f"router2 does not converge: its overused wires fell to {best[1]:,} at iteration {best[0]} and "
                f"rose to {last[1]:,} by iteration {last[0]}")
    if last[0] - best[0] >= (NEAR_STALLED_ITERATIONS if near else STALLED_ITERATIONS):
        return (f"router2 does not converge: its overused wires fell to {best[1]:,} at iteration {best[0]} and "
                f"were no lower by iteration {last[0]} ({last[1]:,})")
    return None


def router_log_diverges(log):
    """:func:`router_diverges` of the log file ``log`` (None while it cannot be read)."""
    try:
        return router_diverges(Path(log).read_text(errors="replace"))
    except OSError:
        return None


def run_step(title, command, cwd, env, log=None, *, every=PROGRESS_SECONDS, stream=None, give_up=None):
    """Run one tool of the flow (a shell command in ``cwd``) and return its time in seconds. While it runs,
    say how long it has run and the last line of its log (``log``: Yosys's or nextpnr's, where the placer's
    and the router's iterations go): rewritten in place on a terminal, else a line every ``every`` seconds.
    A tool that fails raises ``subprocess.CalledProcessError`` with the last 15 lines it printed. ``give_up``
    (``log`` -> a reason or None) is asked every ``every`` seconds: with a reason the tool is stopped and
    :class:`GaveUp` raised with it."""
    stream = stream or sys.stdout
    terminal = stream.isatty()
    print(f"{title} ...", end="" if terminal else "\n", file=stream, flush=True)
    begun = said = asked = time.monotonic()
    reason = None
    with open(Path(cwd) / "step.out", "w+") as output:
        # (a session of its own, so that the shell and the tool it starts are stopped together: when ``give_up``
        # says so, and when this process stops, on Ctrl-C say, which a terminal no longer sends them)
        process = subprocess.Popen(command, shell=True, cwd=cwd, env=env, stdout=output, stderr=subprocess.STDOUT,
                                   start_new_session=True)
        try:
            while True:
                try:
                    process.wait(timeout=min(1.0, every / 2))
                    break
                except subprocess.TimeoutExpired:
                    now = time.monotonic()
                    where = _last_line(log)
                    if terminal:
                        print(f"\r{title} ... {now - begun:.0f} s  {where[:80]}\033[K", end="", file=stream,
                              flush=True)
                    elif now - said >= every:
                        print(f"  {now - begun:.0f} s: {where[:100]}", file=stream, flush=True)
                        said = now
                    if give_up is not None and now - asked >= every:
                        asked = now
                        reason = give_up(log)
                        if reason:
                            break
        finally:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
                process.wait()
        output.seek(0)
        printed = output.read()
    if reason:
        print(f"\n{title}: stopped" if terminal else f"{title}: stopped", file=stream, flush=True)
        raise GaveUp(reason)
    seconds = round(time.monotonic() - begun, 1)
    print(f"\r{title} ... {seconds} s\033[K" if terminal else f"{title}: {seconds} s", file=stream, flush=True)
    if process.returncode != 0:
        tail = "\n".join(printed.strip().splitlines()[-15:])
        raise subprocess.CalledProcessError(process.returncode, command, output=tail)
    return seconds


def _last_line(log):
    """The last line of a tool's log so far, without nextpnr's ``Info:`` ('' if there is none yet)."""
    try:
        with open(log, "rb") as file:
            file.seek(0, os.SEEK_END)
            file.seek(max(0, file.tell() - 4096))
            lines = file.read().decode(errors="replace").strip().splitlines()
    except (OSError, TypeError):
        return ""
    return lines[-1].removeprefix("Info:").strip() if lines else ""
