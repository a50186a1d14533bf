# local_slurm: a one-node Slurm cluster on localhost (munged, slurmctld, slurmd) for the batch-job tests.
"""Start and stop a private Slurm: its own munge socket and key, ports, state and spool directories.

Nothing outside the given directory is touched, so it runs beside a site's own Slurm. Client commands
find it through the environment `env()` returns (SLURM_CONF).
"""

import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

DAEMONS = ("munged", "slurmctld", "slurmd")


class SlurmError(Exception):
    """The local cluster could not be started."""


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def find(program):
    for d in ("/usr/sbin", "/usr/bin", "/sbin"):
        if os.access(os.path.join(d, program), os.X_OK):
            return os.path.join(d, program)
    return shutil.which(program)


class LocalSlurm:
    def __init__(self, root, cpus=2):
        self.root = Path(root)
        self.cpus = cpus
        self.conf = self.root / "slurm.conf"
        self.socket = self.root / "munge.sock"
        self.host = socket.gethostname().split(".")[0]
        self.started = False

    def env(self):
        return dict(os.environ, SLURM_CONF=str(self.conf))

    def log(self, name):
        path = self.root / "log" / f"{name}.log"
        return path.read_text(errors="replace")[-4000:] if path.exists() else "(no log)"

    def start(self):
        missing = [p for p in DAEMONS + ("mungekey", "sbatch", "squeue", "sinfo") if not find(p)]
        if missing:
            raise SlurmError("missing " + ", ".join(missing) + ": install Debian's slurm-wlm and munge "
                             "(scripts/test-packages.txt)")
        for d in ("log", "state", "spool"):
            (self.root / d).mkdir(parents=True, exist_ok=True)
        key = self.root / "munge.key"
        if not key.exists():
            subprocess.run([find("mungekey"), "-c", "-k", str(key)], check=True, capture_output=True)
        user = subprocess.run(["id", "-un"], capture_output=True, text=True, check=True).stdout.strip()
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // (1 << 20) // 2
        self.conf.write_text("\n".join([
            "ClusterName=tsplocal",
            f"SlurmctldHost={self.host}(127.0.0.1)",
            "AuthType=auth/munge", "CredType=cred/munge", f"AuthInfo=socket={self.socket}",
            f"SlurmUser={user}", f"SlurmdUser={user}",
            f"SlurmctldPort={free_port()}", f"SlurmdPort={free_port()}",
            f"StateSaveLocation={self.root / 'state'}", f"SlurmdSpoolDir={self.root / 'spool'}",
            f"SlurmctldPidFile={self.root / 'slurmctld.pid'}", f"SlurmdPidFile={self.root / 'slurmd.pid'}",
            f"SlurmctldLogFile={self.root / 'log' / 'slurmctld.log'}",
            f"SlurmdLogFile={self.root / 'log' / 'slurmd.log'}",
            "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none",
            "SelectType=select/cons_tres", "SelectTypeParameters=CR_Core",
            "MpiDefault=none", "JobAcctGatherType=jobacct_gather/none", "SchedulerType=sched/backfill",
            "ReturnToService=2", "KillWait=30", "MinJobAge=300", "MailProg=/bin/true",
            f"NodeName={self.host} NodeAddr=127.0.0.1 CPUs={self.cpus} RealMemory={memory} State=UNKNOWN",
            "PartitionName=local Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES",
            ""]))
        env = self.env()
        subprocess.run([find("munged"), "--force", f"--socket={self.socket}", f"--key-file={key}",
                        f"--log-file={self.root / 'log' / 'munged.log'}", f"--pid-file={self.root / 'munged.pid'}",
                        f"--seed-file={self.root / 'munged.seed'}"], check=True, capture_output=True)
        self.started = True
        subprocess.run([find("slurmctld"), "-f", str(self.conf), "-i"], check=True, capture_output=True, env=env)
        subprocess.run([find("slurmd"), "-f", str(self.conf)], check=True, capture_output=True, env=env)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            state = subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True, env=env)
            if state.returncode == 0 and state.stdout.strip() in ("idle", "mixed", "allocated"):
                return self
            time.sleep(0.5)
        raise SlurmError("the local Slurm did not come up in 60 s:\n" + self.log("slurmctld") + self.log("slurmd"))

    def stop(self):
        if not self.started:
            return
        for name in ("slurmd", "slurmctld", "munged"):
            pid_file = self.root / f"{name}.pid"
            try:
                pid = int(pid_file.read_text().strip())
                os.kill(pid, 15)
                for _ in range(100):
                    os.kill(pid, 0)
                    time.sleep(0.1)
                os.kill(pid, 9)
            except (OSError, ValueError):
                pass
        self.started = False

    def wait_running(self, job, timeout=300):
        """Wait until `job` runs (its batch shell has started)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            out = subprocess.run(["squeue", "-h", "-j", str(job), "-o", "%T"], capture_output=True, text=True,
                                 env=self.env())
            state = out.stdout.strip()
            if state == "RUNNING":
                return
            if out.returncode == 0 and not state:
                raise SlurmError(f"job {job} left the queue before it was seen running")
            time.sleep(0.2)
        raise SlurmError(f"job {job} not running after {timeout} s")

    def wait(self, job, timeout=600):
        """Wait until every task of `job` has left the queue; returns the jobs' final states (sacct-free)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            out = subprocess.run(["squeue", "-h", "-j", str(job), "-o", "%i %T"], capture_output=True, text=True,
                                 env=self.env())
            if out.returncode == 0 and not out.stdout.strip():
                return
            time.sleep(0.5)
        raise SlurmError(f"job {job} still queued after {timeout} s")

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()
