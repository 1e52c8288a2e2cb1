"""A real single-node Slurm (munged + slurmctld + slurmd from Debian's packages) for the launcher tests.

Everything lives in a temporary directory with its own ports; the daemons are started here and
stopped by their process ids. `LocalSlurm.available()` says why it cannot run where it cannot.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

BINARIES = ("munged", "slurmctld", "slurmd", "sbatch", "scontrol", "squeue", "sacct")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LocalSlurm:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.procs: list[subprocess.Popen] = []
        self.host = socket.gethostname()
        self.conf = root / "slurm.conf"
        self.env = {**os.environ, "SLURM_CONF": str(self.conf)}

    @staticmethod
    def available() -> str | None:
        """None where a local Slurm can start; else the reason it cannot."""
        missing = [b for b in BINARIES if shutil.which(b) is None]
        if missing:
            return f"not installed: {', '.join(missing)} (apt-get install slurm-wlm)"
        if os.geteuid() != 0:
            return "slurmd must run as root to launch jobs"
        if not Path("/etc/munge/munge.key").is_file():
            return "no /etc/munge/munge.key"
        return None

    def _write_conf(self) -> None:
        r = self.root
        for d in ("state", "spool", "munge"):
            (r / d).mkdir(parents=True, exist_ok=True)
        os.chown(r / "munge", 0, 0)
        cpus = os.cpu_count() or 1
        self.conf.write_text(f"""ClusterName=stridetest
SlurmctldHost={self.host}
SlurmctldPort={_free_port()}
SlurmdPort={_free_port()}
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={r}/munge/munge.sock
SlurmUser=root
SlurmdUser=root
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SchedulerType=sched/builtin
SchedulerParameters=sched_interval=2
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
StateSaveLocation={r}/state
SlurmdSpoolDir={r}/spool
SlurmctldPidFile={r}/slurmctld.pid
SlurmdPidFile={r}/slurmd.pid
SlurmctldLogFile={r}/slurmctld.log
SlurmdLogFile={r}/slurmd.log
ReturnToService=2
JobRequeue=1
KillWait=30
InactiveLimit=0
MinJobAge=600
JobCompType=jobcomp/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
NodeName={self.host} CPUs={cpus} State=UNKNOWN
PartitionName=debug Nodes={self.host} Default=YES MaxTime=INFINITE State=UP
""")

    def start(self, timeout_s: float = 60) -> None:
        self._write_conf()
        r = self.root
        self.procs.append(subprocess.Popen(
            ["munged", "-F", "--force", f"--socket={r}/munge/munge.sock", f"--pid-file={r}/munge/munged.pid",
             f"--log-file={r}/munge/munged.log", f"--seed-file={r}/munge/seed"],
            stdout=subprocess.DEVNULL, stderr=open(r / "munged.err", "w")))  # noqa: SIM115
        self._wait(lambda: (r / "munge" / "munge.sock").exists(), 10, "munged socket")
        for cmd in (["slurmctld", "-D", "-i", "-f", str(self.conf)], ["slurmd", "-D", "-f", str(self.conf)]):
            self.procs.append(subprocess.Popen(cmd, env=self.env, stdout=subprocess.DEVNULL,
                                               stderr=open(r / f"{cmd[0]}.err", "w")))  # noqa: SIM115
            time.sleep(1)
        self._wait(self.node_idle, timeout_s, "node idle in sinfo")

    def node_idle(self) -> bool:
        out = subprocess.run(["sinfo", "-h", "-o", "%t"], env=self.env, capture_output=True, text=True)
        return out.returncode == 0 and out.stdout.strip() == "idle"

    def _wait(self, ok, timeout_s: float, what: str) -> None:
        end = time.monotonic() + timeout_s
        while time.monotonic() < end:
            for p in self.procs:
                if p.poll() is not None:
                    raise RuntimeError(f"{p.args[0]} exited with {p.returncode} while waiting for {what}: "
                                       f"see {self.root}")
            if ok():
                return
            time.sleep(0.5)
        raise TimeoutError(f"timed out after {timeout_s} s waiting for {what}: see logs in {self.root}")

    def run(self, *cmd: str) -> str:
        out = subprocess.run(list(cmd), env=self.env, capture_output=True, text=True, timeout=60)
        if out.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed ({out.returncode}): {out.stderr}")
        return out.stdout

    def job_state(self, job_id: str) -> str:
        out = self.run("scontrol", "show", "job", job_id)
        for word in out.split():
            if word.startswith("JobState="):
                return word.split("=", 1)[1]
        raise RuntimeError(f"no JobState for {job_id}: {out}")

    def stop(self) -> None:
        """Cancel what is left in the queue (slurmstepd outlives slurmd otherwise), then stop the daemons."""
        if self.procs and all(p.poll() is None for p in self.procs):
            subprocess.run(["scancel", "--full", "--user=root"], env=self.env, capture_output=True, timeout=30)
            end = time.monotonic() + 60
            while time.monotonic() < end:
                q = subprocess.run(["squeue", "-h"], env=self.env, capture_output=True, text=True, timeout=30)
                if q.returncode != 0 or not q.stdout.strip():
                    break
                time.sleep(0.5)
        for p in reversed(self.procs):
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
        self.procs.clear()
