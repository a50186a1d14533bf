# job_signal: signals a running tsp-sim job at a point its progress line names, shared by the runtime's
# signal and fault tests (tests/runtime/signal_test.py, tests/runtime/fault_test.py).
"""Signals a running job where a progress line shows it is: every process of the job is stopped
(SIGSTOP) when the line is read, the signal is sent (to a rank, or to mpirun, which forwards it later)
and seen pending in every process it must reach, then they all continue (SIGCONT) and get it at
once. So the run is at the same point when it notices the signal on a fast machine and on a slow
one, with no sleep."""
import os
import signal
import subprocess
import time


def rank_pids(mpirun_pid, ranks):
    """The tsp-sim processes of the job, by MPI rank."""
    found = {}
    deadline = time.time() + 30
    while len(found) < ranks and time.time() < deadline:
        for pid in subprocess.run(["pgrep", "-P", str(mpirun_pid)], capture_output=True, text=True).stdout.split():
            try:
                with open(f"/proc/{pid}/environ", "rb") as f:
                    env = dict(item.split(b"=", 1) for item in f.read().split(b"\0") if b"=" in item)
            except OSError:
                continue
            if b"OMPI_COMM_WORLD_RANK" in env:
                found[int(env[b"OMPI_COMM_WORLD_RANK"])] = int(pid)
        time.sleep(0.05)
    return found


def state(pid):
    """The process's state letter (R, S, T, Z, ...), or None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return None


def running(pid):
    return state(pid) not in (None, "Z")


def pending(pid, sig):
    """Whether sig waits to be delivered to the process (or it is gone)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            fields = dict(line.split(":", 1) for line in f if ":" in line)
    except OSError:
        return True
    mask = int(fields["ShdPnd"], 16) | int(fields["SigPnd"], 16)
    return bool(mask >> (sig - 1) & 1) or not running(pid)


def _until(cond, timeout):
    deadline = time.time() + timeout
    while not cond():
        if time.time() > deadline:
            return False
        time.sleep(0.01)
    return True


def signal_stopped(pids, sig, send, receivers, timeout=30):
    """Stops the processes pids, calls send() (which sends sig), waits until sig is pending in every
    process of receivers, and continues pids. Returns (the time they continued, whether sig reached
    every receiver within timeout seconds); they continue either way."""
    for pid in pids:
        try:
            os.kill(pid, signal.SIGSTOP)
        except ProcessLookupError:
            pass
    _until(lambda: all(state(p) in (None, "Z", "T", "t") for p in pids), timeout)
    send()
    arrived = _until(lambda: all(pending(p, sig) for p in receivers), timeout)
    for pid in pids:
        try:
            os.kill(pid, signal.SIGCONT)
        except ProcessLookupError:
            pass
    return time.time(), arrived
