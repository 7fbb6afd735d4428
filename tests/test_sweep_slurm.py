#!/usr/bin/env python3
"""`python3 -m manyadd.sweep slurm` against a real Slurm (Debian's slurm-wlm 22.05 and munge): a one-node
cluster on localhost that this test starts (munged with its own key and socket, slurmctld and slurmd as
root from a generated slurm.conf, free ports, everything under one temporary directory) and stops at the
end, also on failure. Then:
1. a sweep of 4 micro runs submitted as one array (--array=0-3%2), waited for: every task's log, every run
   evaluated, one model byte-identical to `train --config` of its planned configuration, collect;
2. a longer micro run submitted alone, its array task requeued (`scontrol requeue JOB_0`) once a
   checkpoint is written and before the last step: Slurm kills the task and runs it again, the task
   resumes from the checkpoint, and the run ends byte-identical to an uninterrupted one (model,
   checkpoint, log.csv and eval.csv but their wall-clock columns).
Exit 77 (ctest: skipped), the reason printed, where the cluster cannot start: not root, a package
missing, the daemons not up within 30 s. About 40 s. Needs TRAIN (and evaluate beside it).
"""
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

SOURCE = os.environ.get("MANYADD_SOURCE_DIR") or os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TRAIN = os.environ.get("TRAIN") or os.path.join(SOURCE, "build", "learn", "train")
BIN = os.path.dirname(os.path.abspath(TRAIN))
DAEMONS = ("munged", "slurmctld", "slurmd")
CLIENTS = ("sbatch", "squeue", "scontrol", "sinfo", "scancel")
MICRO = {"model": {"n_layers": 1, "d_model": 16, "d_head": 4, "d_ff": 16, "max_pos1": 6, "max_pos2": 6},
         "train": {"train_n": 2, "train_m": 3, "train_size": 200, "batch": 8, "steps": 20, "eval_every": 0,
                   "eval_samples": 2, "threads": 1}}
EVALUATE = {"samples": 1, "args": ["--n-max", "3", "--m-max", "4"]}


def skip(why):
    print("test_sweep_slurm: skipped: %s" % why)
    sys.exit(77)


def which(name):
    return shutil.which(name) or shutil.which(name, path="/usr/sbin:/sbin:/usr/bin")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Cluster:
    """munged + slurmctld + slurmd in the foreground, each in its own session, under self.dir."""

    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="manyadd_slurm_")
        self.procs = []
        d = self.dir
        for sub in ("munge", "state", "spool", "log"):
            os.makedirs(os.path.join(d, sub))
        key = os.path.join(d, "munge", "munge.key")
        with open(key, "wb") as f:
            f.write(os.urandom(1024))
        os.chmod(key, 0o400)
        sock = os.path.join(d, "munge", "munge.sock")
        host = socket.gethostname().split(".")[0]
        self.conf = os.path.join(d, "slurm.conf")
        with open(self.conf, "w") as f:
            f.write("\n".join([
                "ClusterName=manyaddsweep", "SlurmctldHost=%s(127.0.0.1)" % host, "SlurmUser=root", "SlurmdUser=root",
                "SlurmctldPort=%d" % free_port(), "SlurmdPort=%d" % free_port(), "AuthType=auth/munge",
                "CredType=cred/munge", "AuthInfo=socket=%s" % sock, "StateSaveLocation=%s/state" % d,
                "SlurmdSpoolDir=%s/spool" % d, "SlurmctldPidFile=%s/slurmctld.pid" % d,
                "SlurmdPidFile=%s/slurmd.pid" % d, "SlurmctldLogFile=%s/log/slurmctld.log" % d,
                "SlurmdLogFile=%s/log/slurmd.log" % d, "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none",
                "JobAcctGatherType=jobacct_gather/none", "AccountingStorageType=accounting_storage/none",
                "SchedulerType=sched/backfill", "SelectType=select/cons_tres", "SelectTypeParameters=CR_Core",
                "ReturnToService=2", "MpiDefault=none", "SwitchType=switch/none", "PlugStackConfig=/dev/null",
                "NodeName=%s NodeAddr=127.0.0.1 CPUs=2 RealMemory=4000 State=UNKNOWN" % host,
                "PartitionName=cpu Nodes=%s Default=YES MaxTime=INFINITE State=UP" % host]) + "\n")
        self.env = dict(os.environ, SLURM_CONF=self.conf, PYTHONPATH=os.path.join(SOURCE, "python"))
        self.env.pop("MANYADD_BIN", None)
        self.start([which("munged"), "-F", "-f", "--key-file", key, "--socket", sock, "--pid-file",
                    d + "/munge/munged.pid", "--log-file", d + "/munge/munged.log", "--seed-file", d + "/munge/seed"])
        t0 = time.monotonic()
        while not os.path.exists(sock) and time.monotonic() - t0 < 10:
            time.sleep(0.1)
        self.start([which("slurmctld"), "-D", "-f", self.conf])
        self.start([which("slurmd"), "-D", "-f", self.conf])

    def start(self, cmd):
        log = open(os.path.join(self.dir, "log", os.path.basename(cmd[0]) + ".out"), "w")
        self.procs.append(subprocess.Popen(cmd, env=self.env, stdout=log, stderr=subprocess.STDOUT,
                                           stdin=subprocess.DEVNULL, start_new_session=True))
        log.close()

    def run(self, *cmd, check=True):
        p = subprocess.run(list(cmd), env=self.env, capture_output=True, text=True, timeout=120)
        if check and p.returncode != 0:
            raise AssertionError("%s: exit %d\n%s%s" % (" ".join(cmd), p.returncode, p.stdout, p.stderr))
        return p

    def up(self, timeout=30):
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout:
            if any(p.poll() is not None for p in self.procs):
                return False
            p = self.run("sinfo", "-h", "-o", "%T", check=False)
            if p.returncode == 0 and p.stdout.strip() == "idle":
                return True
            time.sleep(0.5)
        return False

    def logs(self):
        out = []
        for root, _, files in os.walk(os.path.join(self.dir, "log")):
            for f in files:
                with open(os.path.join(root, f), errors="replace") as fh:
                    out.append("---- %s\n%s" % (f, "".join(fh.readlines()[-15:])))
        return "\n".join(out)

    def stop(self):
        """Cancel what is left, then stop the daemons this test started (by their process groups)."""
        if self.procs and all(p.poll() is None for p in self.procs):
            self.run("scancel", "--user=root", check=False)
            t0 = time.monotonic()
            while time.monotonic() - t0 < 20 and self.run("squeue", "-h", check=False).stdout.strip():
                time.sleep(0.5)
        for p in reversed(self.procs):
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
        for p in reversed(self.procs):
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


def wait_done(cl, job, timeout):
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if not cl.run("squeue", "-h", "-j", job, check=False).stdout.strip():
            return
        time.sleep(0.5)
    raise AssertionError("job %s not done after %d s:\n%s" % (job, timeout, cl.run("squeue", check=False).stdout))


def submit(cl, sweep_file, out, *extra):
    p = cl.run(sys.executable, "-m", "manyadd.sweep", "slurm", sweep_file, "--out", out, "--bin", BIN,
               "--partition", "cpu", "--time", "10", *extra)
    line = [l for l in p.stdout.splitlines() if l.startswith("submitted array job ")]
    assert line, p.stdout
    return line[0].split()[3].rstrip(";")


def read(path):
    with open(path) as f:
        return f.read()


def columns(path, k):
    return [",".join(l.strip().split(",")[:k]) for l in read(path).splitlines() if l.strip()]


def train_ref(config, out):
    subprocess.run([TRAIN, "--config", config, "--out", out, "-q"], check=True, capture_output=True)


def check_array(cl, work):
    desc = {"name": "sweeptest", "base": MICRO, "axes": {"train.seed": [1, 2], "model.d_model": [16, 8]},
            "run_name": "s{train.seed}-d{model.d_model}", "evaluate": EVALUATE}
    f = os.path.join(work, "array.json")
    with open(f, "w") as fh:
        json.dump(desc, fh)
    out = os.path.join(work, "array")
    job = submit(cl, f, out, "--max-parallel", "2")
    script = read(os.path.join(out, "sweep.sbatch"))
    for line in ("#SBATCH --array=0-3%2", "#SBATCH --requeue", "#SBATCH --cpus-per-task=1", "#SBATCH --partition=cpu"):
        assert line + "\n" in script, script
    wait_done(cl, job, 120)
    names = ["s1-d16", "s1-d8", "s2-d16", "s2-d8"]
    for i, n in enumerate(names):
        log = read(os.path.join(out, "logs", "slurm-%s_%d.out" % (job, i)))
        assert "run %d %s: trained, evaluated in" % (i, n) in log, log
    plan = cl.run(sys.executable, "-m", "manyadd.sweep", "plan", f, "--out", out).stdout
    assert "0 new, 0 partial, 0 trained, 4 evaluated" in plan, plan
    train_ref(os.path.join(out, "configs", "s2-d8.json"), os.path.join(work, "ref-array"))
    with open(os.path.join(work, "ref-array", "model.safetensors"), "rb") as a, \
            open(os.path.join(out, "runs", "s2-d8", "model.safetensors"), "rb") as b:
        assert a.read() == b.read(), "s2-d8 differs from train --config of its configuration"
    p = cl.run(sys.executable, "-m", "manyadd.sweep", "collect", f, "--out", out)
    assert "| **d_model16, median of 2** |" not in p.stdout  # groups are named by their values
    assert "| **16, median of 2** |" in p.stdout and "| **8, median of 2** |" in p.stdout, p.stdout
    rows = read(os.path.join(out, "collect", "grids.csv")).splitlines()
    assert rows[0].startswith("index,run,train.seed,model.d_model,n,m,") and len(rows) == 1 + 4 * 9, rows[:2]
    print("array: 4 runs as job %s, evaluated, collected" % job)


def check_requeue(cl, work):
    d = json.loads(json.dumps(MICRO))
    d["train"].update(steps=5000, log_every=10, checkpoint_every=100, eval_every=1000, seed=7)
    f = os.path.join(work, "long.json")
    with open(f, "w") as fh:
        json.dump({"base": d, "run_name": "long", "evaluate": EVALUATE}, fh)
    out = os.path.join(work, "long")
    job = submit(cl, f, out)
    cfg = os.path.join(out, "runs", "long", "config.json")
    step, t0 = 0, time.monotonic()
    while time.monotonic() - t0 < 60:
        try:
            step = json.loads(read(cfg))["step"]
        except (OSError, ValueError, KeyError):
            step = 0
        if step >= 200:
            break
        time.sleep(0.05)
    assert 200 <= step < 5000, "no checkpoint mid-run within 60 s (step %d)" % step
    cl.run("scontrol", "requeue", "%s_0" % job)
    # A requeued job waits (its begin time is pushed back about two minutes); start it now.
    t0 = time.monotonic()
    while time.monotonic() - t0 < 30:
        state = cl.run("squeue", "-h", "-j", job, "-o", "%T", check=False).stdout.strip()
        if state == "PENDING" and cl.run("scontrol", "update", "JobId=%s_0" % job, "StartTime=now",
                                         check=False).returncode == 0:
            break
        time.sleep(0.2)
    else:
        raise AssertionError("the requeued task did not come back pending (state %r)" % state)
    wait_done(cl, job, 120)
    show = cl.run("scontrol", "show", "job", job, check=False).stdout
    assert "Restarts=1" in show, show
    log = read(os.path.join(out, "logs", "slurm-%s_0.out" % job))
    assert "DUE TO JOB REQUEUE" in log and "run 0 long: partial" in log, log
    assert "run 0 long: resumed from step" in log and ", trained, evaluated in" in log, log
    ref = os.path.join(work, "ref-long")
    train_ref(os.path.join(out, "configs", "long.json"), ref)
    run = os.path.join(out, "runs", "long")
    for fn in ("model.safetensors", "checkpoint.safetensors"):
        with open(os.path.join(ref, fn), "rb") as a, open(os.path.join(run, fn), "rb") as b:
            assert a.read() == b.read(), "%s differs from the uninterrupted run" % fn
    assert columns(os.path.join(ref, "log.csv"), 4) == columns(os.path.join(run, "log.csv"), 4), "log.csv differs"
    assert len(columns(os.path.join(run, "log.csv"), 4)) == 501
    assert columns(os.path.join(ref, "eval.csv"), 3) == columns(os.path.join(run, "eval.csv"), 3), "eval.csv differs"
    print("requeue: job %s's task killed at step >= %d, requeued, resumed; byte-identical to the uninterrupted run"
          % (job, step))


def main():
    if not (os.path.isfile(TRAIN) and os.path.isfile(os.path.join(BIN, "evaluate"))):
        print("test_sweep_slurm: no train/evaluate at %s (set TRAIN, or build)" % BIN, file=sys.stderr)
        return 2
    if os.geteuid() != 0:
        skip("not root (the test runs slurmctld, slurmd and munged as root)")
    missing = [n for n in DAEMONS + CLIENTS if not which(n)]
    if missing:
        skip("not installed: %s (Debian: apt-get install slurm-wlm munge; ./x installs them as root)"
             % " ".join(missing))
    t0 = time.monotonic()
    cl = Cluster()
    work = tempfile.mkdtemp(prefix="manyadd_sweep_slurm_")
    try:
        if not cl.up():
            print(cl.logs())
            skip("the one-node Slurm cluster did not come up within 30 s (daemon logs above)")
        print("cluster up in %.1f s (%s)" % (time.monotonic() - t0, cl.conf))
        try:
            check_array(cl, work)
            check_requeue(cl, work)
        except AssertionError:
            print(cl.logs())
            raise
    finally:
        cl.stop()
        shutil.rmtree(work, ignore_errors=True)
    print("test_sweep_slurm: OK in %.1f s" % (time.monotonic() - t0))
    return 0


if __name__ == "__main__":
    sys.exit(main())
