# SPDX-License-Identifier: MIT
"""run.py - batchd against the data loaders people use today, on the same
data, side by side (the peers' harness; tools/peers/README.md).

    tools/peers/bench.sh --workload all --build build --workdir /var/tmp/peers

Workloads:
  raw       N samples (20k x 8 KiB), page cache warm: batchd, torch's
            DataLoader over files, WebDataset, litData, Mosaic MDS, DALI
  raw-cold  a dataset larger than a memory cgroup's limit; every run (the
            peer's process and its workers; batchd's daemon and its
            consumer) in that cgroup, so every epoch reads the disk
  remote    the dataset in a local S3 server (tests/remote/s3lib.sh):
            batchd's remote datasets, litData and Mosaic streaming from
            the bucket, each into its own fresh cache; epoch 1 (from the
            bucket) and epoch 2 (from the cache)
  resume    tools/peers/resume.py, run as it is, its tables included
  tokens    LLM pretraining: windows of seq_len + 1 ids of one source of
            the machine's own text, tokenized (tokens_data.py): batchd,
            litData's TokensLoader, Mosaic MDS, nanoGPT's np.memmap and a
            permuted variant (tokens.py); tokens/s
  tokens-mix  the same over three sources by weight
  tokens-cold  one epoch of the whole corpus as one source in a memory
            cgroup (as raw-cold), the page cache dropped before each run;
            beside it the disk's own rate over each loader's files

Every measurement is a fresh process (run.py --child), so that no loader's
workers, threads or shared memory outlive it. Each peer first runs once
with every point of its sweep (worker or thread counts); its best (highest
samples/s) then runs in --repeat alternating pairs with batchd, A B A B, so
that both sides of a pair see the same machine. Every epoch is checked:
every sample once, bytes unchanged (loaders.check_epoch). Printed: per
workload a table of median samples/s and MB/s, the median of the pairs'
ratios batchd/peer with min-max, the load average; written: results.json
and peers.png under --out (default WORKDIR/results).
"""
import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
sys.path.insert(1, os.path.join(ROOT, "tools", "bench"))  # bench_daemon

import bench_daemon  # noqa: E402
import data        # noqa: E402
import loaders     # noqa: E402
import tokens      # noqa: E402
import tokens_data  # noqa: E402

WORKLOADS = ("raw", "raw-cold", "remote", "resume", "tokens", "tokens-mix", "tokens-cold")
CGROUP_NAME = "batchd-peers"
# batchd's settings in the workload running (raw-cold sets "memory"; see there).
BATCHD_SETTINGS = {}
med = statistics.median


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def loadavg():
    return [round(x, 2) for x in os.getloadavg()]


# ---- one measurement, in a child process ---------------------------------------------------------

def child_main():
    spec = json.load(sys.stdin)
    try:
        out = (tokens if spec.get("kind") in ("tokens", "disk") else loaders).run_one(spec)
    except BaseException as e:      # the driver reports it; a child never hangs the run
        import traceback
        traceback.print_exc(file=sys.stderr)
        out = {"error": f"{type(e).__name__}: {e}".strip()}
    sys.stdout.flush()
    print("\n" + json.dumps(out), flush=True)
    # Some loaders leave non-daemon threads behind (prefetchers): do not wait for them.
    os._exit(0)


class Runner:
    """Starts children with the environment they need, in a cgroup when asked."""

    def __init__(self, args):
        self.args = args
        self.cgroup = None          # the cgroup's procs file, or None
        self.env = dict(os.environ)
        pp = [os.path.join(ROOT, "client", "python"), HERE]
        if self.env.get("PYTHONPATH"):
            pp.append(self.env["PYTHONPATH"])
        self.env["PYTHONPATH"] = os.pathsep.join(pp)
        self.env["BATCHCLIENT_LIB"] = os.path.join(args.build, "client", "libbatchclient.so.0")
        self.env.setdefault("PYTHONWARNINGS", "ignore")

    def preexec(self):
        procs = self.cgroup
        if procs is None:
            return None

        def enter():
            with open(procs, "w") as f:
                f.write(str(os.getpid()))
        return enter

    def child(self, spec, what):
        """One measurement. @return its result, with "load" (at its start)
        and "error" (text) when it failed."""
        load = loadavg()
        kills0 = self.oom_kills()
        p = subprocess.run([sys.executable, os.path.abspath(__file__), "--child"],
                           input=json.dumps(spec), capture_output=True, text=True,
                           env=self.env, preexec_fn=self.preexec(),
                           timeout=self.args.run_timeout)
        last = p.stdout.strip().splitlines()[-1] if p.stdout.strip() else ""
        try:
            out = json.loads(last)
        except ValueError:
            out = {"error": f"exit {p.returncode}, no result"}
        kills = self.oom_kills()
        if "error" in out and kills is not None and kills0 is not None and kills > kills0:
            out["error"] += f" [the cgroup's OOM killer killed {kills - kills0} of its processes]"
        if "error" in out:
            tail = "\n".join(p.stderr.strip().splitlines()[-12:])
            out["stderr"] = tail
            log(f"  {what}: FAILED: {out['error']}\n    " + tail.replace("\n", "\n    "))
        out["load"] = load
        return out

    def oom_kills(self):
        """The cgroup's OOM kill count (v1 memory.oom_control, v2
        memory.events), or None."""
        if self.cgroup is None:
            return None
        d = os.path.dirname(self.cgroup)
        for nm in ("memory.oom_control", "memory.events"):
            try:
                with open(os.path.join(d, nm)) as f:
                    return int(dict(line.split() for line in f if line.strip())["oom_kill"])
            except (OSError, KeyError, ValueError):
                pass
        return None

    def daemon(self, argv, sock, logpath):
        """batchd with argv (--no-config first), answering on sock, in this
        run's cgroup when it has one; the Popen (bench_daemon.start_batchd)."""
        if os.path.exists(sock):
            os.unlink(sock)
        with open(logpath, "ab") as lf:
            return bench_daemon.start_batchd(argv, sock, lf, preexec_fn=self.preexec(),
                                             timeout_s=10)


def stop(p):
    if p is not None and p.poll() is None:
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(30)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


# ---- sweep, pairs, rows ----------------------------------------------------------------------------

def sweep_points(args, peer, table=loaders):
    knob = table.PEERS[peer]["knob"]
    if knob is None:
        return [dict(BATCHD_SETTINGS) if peer == "batchd" else {}]
    vals = args.dali_threads if knob == "num_threads" else args.workers
    return [{knob: v} for v in vals]


class Contest:
    """One workload's sweep and pairs. spec(peer, settings) gives a child's
    spec; before(peer) runs before each measurement (drop caches, start a
    daemon) and after(peer) after it. table: the module whose PEERS and
    describe() name the peers (loaders, or tokens for the token
    workloads)."""

    def __init__(self, runner, peers, spec, before=None, after=None, metric="samples_s",
                 table=loaders):
        self.runner, self.peers, self.spec = runner, peers, spec
        self.table = table
        self.before, self.after = before or (lambda p: None), after or (lambda p: None)
        self.metric = metric
        self.failed = {}            # peer: reason
        self.sweep_failed = {}      # peer: {settings: reason} (points of its sweep that failed)
        self.swept = {}             # peer: [(settings, result)]
        self.best = {}
        self.ours, self.theirs = [], {}

    def measure(self, peer, s, what):
        self.before(peer)
        try:
            r = self.runner.child(self.spec(peer, s), what)
        finally:
            self.after(peer)
        if "error" not in r:
            unit = "tokens/s" if self.metric == "tokens_s" else "samples/s"
            log(f"  {what}: {r[self.metric if unit == 'tokens/s' else 'samples_s']:,.0f} {unit} "
                f"(epochs {', '.join(f'{t:.2f}' for t in r['epoch_s'])} s; load {r['load'][0]})")
        return r

    def sweep(self, sweep_repeat):
        for rep in range(sweep_repeat):
            for p in self.peers:
                if p in self.failed:
                    continue
                for s in sweep_points(self.runner.args, p, self.table):
                    r = self.measure(p, s, f"sweep {rep + 1}: {p}, {self.table.describe(p, s)}")
                    if "error" in r:
                        self.sweep_failed.setdefault(p, {})[self.table.describe(p, s)] = r["error"]
                        if not any("error" not in x for _, x in self.swept.get(p, [])):
                            self.failed[p] = r["error"] + ("\n" + r["stderr"] if r.get("stderr")
                                                           else "")
                            break
                        continue
                    self.swept.setdefault(p, []).append((s, r))
        for p, runs in self.swept.items():
            by = {}
            for s, r in runs:
                by.setdefault(json.dumps(s, sort_keys=True), []).append(r[self.metric])
            self.best[p] = json.loads(max(by, key=lambda k: med(by[k])))

    def pairs(self, repeat):
        if "batchd" not in self.peers or "batchd" in self.failed:
            return
        others = [p for p in self.peers if p != "batchd" and p in self.best]
        for rep in range(repeat):
            for p in others:
                a = self.measure("batchd", BATCHD_SETTINGS, f"pair {rep + 1}: batchd")
                b = self.measure(p, self.best[p],
                                 f"pair {rep + 1}: {p}, {self.table.describe(p, self.best[p])}")
                if "error" in a or "error" in b:
                    continue
                log(f"  pair {rep + 1}: batchd / {p} = {a[self.metric] / b[self.metric]:.2f}x")
                self.ours.append(a)
                self.theirs.setdefault(p, []).append((a, b))

    def rows(self, size, metric=None):
        metric = metric or self.metric
        rows = []
        ours = self.ours or [r for _, r in self.swept.get("batchd", [])]
        if ours:
            v = [r[metric] for r in ours]
            rows.append({"peer": "batchd", "loader": self.table.PEERS["batchd"]["title"],
                         "settings": self.table.describe("batchd", self.best.get("batchd", {})),
                         "runs": len(v),
                         "samples_s": med(v),
                         "min": min(v), "max": max(v), "bytes_s": med(v) * size,
                         "load": [min(r["load"][0] for r in ours), max(r["load"][0] for r in ours)]})
        for p in self.peers:
            if p == "batchd" or p in self.failed or p not in self.best:
                continue
            pr = self.theirs.get(p)
            if pr:
                runs = [b for _, b in pr]
                ratios = [a[metric] / b[metric] for a, b in pr]
            else:
                runs = [r for s, r in self.swept[p] if s == self.best[p]]
                ratios = []
            v = [r[metric] for r in runs]
            row = {"peer": p, "loader": self.table.PEERS[p]["title"],
                   "settings": self.table.describe(p, self.best[p]), "runs": len(v),
                   "samples_s": med(v), "min": min(v), "max": max(v), "bytes_s": med(v) * size,
                   "load": [min(r["load"][0] for r in runs), max(r["load"][0] for r in runs)],
                   "sweep": {self.table.describe(p, s): r[metric] for s, r in self.swept[p]},
                   "sweep_failed": self.sweep_failed.get(p, {})}
            if ratios:
                row.update(ratio=med(ratios), ratio_min=min(ratios), ratio_max=max(ratios))
            rows.append(row)
        return rows


def print_table(title, rows, note=""):
    print(f"\n## {title}" + (f" ({note})" if note else ""))
    print(f"| {'loader':<30} | {'best settings':<16} | {'runs':>4} | {'samples/s':>10} "
          f"| {'MB/s':>7} | {'batchd / this: median (min-max)':>31} | {'load':>9} |")
    print(f"|{'-' * 32}|{'-' * 18}|{'-' * 6}|{'-' * 12}|{'-' * 9}|{'-' * 33}|{'-' * 11}|")
    for r in rows:
        print(f"| {r['loader']:<30} | {r['settings']:<16} | {r['runs']:>4} | "
              f"{r['samples_s']:>10,.0f} | {r['bytes_s'] / 1e6:>7.1f} | {ratio_cell(r):>31} | "
              f"{load_cell(r):>9} |")
    print_sweeps(rows)


def ratio_cell(r):
    return f"{r['ratio']:.2f}x ({r['ratio_min']:.2f}-{r['ratio_max']:.2f})" if "ratio" in r else "-"


def load_cell(r):
    return f"{r['load'][0]:.1f}-{r['load'][1]:.1f}"


def print_sweeps(rows):
    """Below a table: each peer's sweep, one run a setting, failed ones too."""
    for r in rows:
        if r.get("sweep") and len(r["sweep"]) + len(r.get("sweep_failed", {})) > 1:
            print(f"  sweep, {r['peer']}: " + ", ".join(
                [f"{k} {v:,.0f}" for k, v in r["sweep"].items()] +
                [f"{k} failed ({why})" for k, why in r.get("sweep_failed", {}).items()]))


def print_failed(failed, table=loaders):
    for p, why in failed.items():
        first = why.splitlines()[0] if why else "?"
        print(f"  did not run: {table.PEERS[p]['title'] if p in table.PEERS else p}: {first}")


# ---- availability ------------------------------------------------------------------------------

def importable(peers, table=loaders):
    """{peer: reason} for peers whose module does not import here."""
    out = {}
    for p in peers:
        mod = table.PEERS[p]["module"]
        r = subprocess.run([sys.executable, "-c", f"import {mod}"], capture_output=True, text=True,
                           env=RUNNER.env)
        if r.returncode:
            out[p] = (r.stderr.strip().splitlines() or ["import failed"])[-1]
    return out


def formats_for(peers):
    return sorted({loaders.PEERS[p]["format"] for p in peers} | {"raw"})


def prepare(work, n, size, peers, failed):
    """data.prepare, a writer's failure recorded against its peers."""
    d = {}
    for fmt in formats_for(peers):
        try:
            d.update(data.prepare(work, n, size, ARGS.seed, [fmt], ARGS.build, log=log))
        except Exception as e:      # one writer's failure loses only its peers
            for p in peers:
                if loaders.PEERS[p]["format"] == fmt:
                    failed[p] = f"writing its format failed: {type(e).__name__}: {e}"
    return d


def base_spec(d, n, size, peer, s, fmt_dir):
    return {"peer": peer, "settings": s, "n": n, "size": size, "fps": d["fps_path"],
            "batch_size": ARGS.batch_size, "seed": ARGS.seed, "warmup": 1,
            "epochs": ARGS.epochs, "path": fmt_dir}


# ---- the workloads ---------------------------------------------------------------------------------

def workload_raw(args):
    peers = [p for p in args.peers if p in loaders.PEERS]
    failed = importable(peers)
    peers = [p for p in peers if p not in failed]
    work = os.path.join(args.workdir, f"raw-{args.samples}x{args.record_size}")
    d = prepare(work, args.samples, args.record_size, peers, failed)
    d["fps_path"] = os.path.join(work, "fps.npy")
    peers = [p for p in peers if p not in failed]
    sock = os.path.join(work, "batchd.sock")
    daemon = None
    load0 = loadavg()

    def spec(p, s):
        sp = base_spec(d, args.samples, args.record_size, p, s, d[loaders.PEERS[p]["format"]])
        sp.update(dataset="data.bpk", socket=sock)
        return sp

    c = Contest(RUNNER, peers, spec)
    try:
        if "batchd" in peers:
            daemon = RUNNER.daemon([os.path.join(args.build, "daemon", "batchd"), "--socket", sock,
                                    "--root", d["bpk"]], sock, os.path.join(work, "batchd.log"))
        c.sweep(args.sweep_repeat)
        c.pairs(args.repeat)
    finally:
        stop(daemon)
    c.failed.update(failed)
    rows = c.rows(args.record_size)
    note = (f"{args.samples} x {args.record_size} B, page cache warm, batch {args.batch_size}, "
            f"{args.epochs} timed epoch(s) after 1 warm-up, {os.cpu_count()} CPUs, load "
            f"{load0[0]} at the start, {loadavg()[0]} at the end")
    print_table("raw", rows, note)
    print_failed(c.failed)
    return {"note": note, "rows": rows, "failed": c.failed, "load": [load0, loadavg()]}


class Cgroup:
    """A memory cgroup of its own (v1: memory.limit_in_bytes, which caps
    the page cache of its tasks too; v2: memory.max), removed at close."""

    def __init__(self, limit):
        v1 = "/sys/fs/cgroup/memory"
        if os.path.isfile(os.path.join(v1, "memory.limit_in_bytes")):
            self.dir, knob = os.path.join(v1, CGROUP_NAME), "memory.limit_in_bytes"
        elif os.path.isfile("/sys/fs/cgroup/cgroup.controllers"):
            self.dir, knob = os.path.join("/sys/fs/cgroup", CGROUP_NAME), "memory.max"
        else:
            raise RuntimeError("no memory cgroup controller mounted (v1 or v2)")
        os.makedirs(self.dir, exist_ok=True)
        with open(os.path.join(self.dir, knob), "w") as f:
            f.write(str(limit))
        self.procs = os.path.join(self.dir, "cgroup.procs")
        self.knob = knob

    def peak(self):
        for nm in ("memory.max_usage_in_bytes", "memory.peak"):
            try:
                with open(os.path.join(self.dir, nm)) as f:
                    return int(f.read())
            except OSError:
                pass
        return None

    def reset_peak(self):
        try:
            with open(os.path.join(self.dir, "memory.max_usage_in_bytes"), "w") as f:
                f.write("0")
        except OSError:
            pass

    def close(self):
        for _ in range(50):
            try:
                os.rmdir(self.dir)
                return
            except OSError:
                time.sleep(0.1)


def drop_caches():
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3")


def workload_cold(args):
    peers = [p for p in args.peers if p in loaders.PEERS]
    failed = importable(peers)
    peers = [p for p in peers if p not in failed]
    n, size = args.cold_samples, args.cold_record_size
    work = os.path.join(args.workdir, f"cold-{n}x{size}")
    d = prepare(work, n, size, peers, failed)
    d["fps_path"] = os.path.join(work, "fps.npy")
    peers = [p for p in peers if p not in failed]
    if os.geteuid() != 0:
        raise RuntimeError("raw-cold needs root (a memory cgroup, dropping the page cache)")
    cg = Cgroup(args.cold_limit)
    sock = os.path.join(work, "batchd.sock")
    state = {"daemon": None}
    peaks = {}
    load0 = loadavg()

    def spec(p, s):
        sp = base_spec(d, n, size, p, s, d[loaders.PEERS[p]["format"]])
        sp.update(dataset="data.bpk", socket=sock, warmup=0, epochs=args.cold_epochs)
        return sp

    def before(p):
        drop_caches()
        RUNNER.cgroup = cg.procs
        cg.reset_peak()
        if p == "batchd":     # a fresh daemon in the cgroup: its memory starts empty too
            mem = ["--memory", BATCHD_SETTINGS["memory"]] if BATCHD_SETTINGS.get("memory") else []
            state["daemon"] = RUNNER.daemon([os.path.join(args.build, "daemon", "batchd"),
                                             "--socket", sock, "--root", d["bpk"], *mem], sock,
                                            os.path.join(work, "batchd.log"))

    def after(p):
        stop(state["daemon"])
        state["daemon"] = None
        RUNNER.cgroup = None
        peaks.setdefault(p, []).append(cg.peak())

    c = Contest(RUNNER, peers, spec, before, after)
    saved = args.workers
    args.workers = args.cold_workers
    # batchd's auto budget is half the room under its cgroup but at least
    # 1 GiB: under a limit near 1 GiB it plans with all of it, and with a
    # dataset that fits it (tier ram) the cgroup killed it once its
    # consumer, in the same cgroup, took its share. Half the limit, as the
    # auto budget means to be.
    if args.cold_batchd_memory != "auto":
        BATCHD_SETTINGS["memory"] = args.cold_batchd_memory or f"{args.cold_limit // 2 >> 20}M"
    try:
        c.sweep(1)
        c.pairs(args.repeat)
    finally:
        args.workers = saved
        BATCHD_SETTINGS.clear()
        stop(state["daemon"])
        RUNNER.cgroup = None
        cg.close()
    c.failed.update(failed)
    rows = c.rows(size)
    for r in rows:
        pk = [x for x in peaks.get(r["peer"], []) if x]
        if pk:
            r["cgroup_peak_mb"] = max(pk) / 1e6
    total = n * size
    note = (f"{n} x {size} B = {total / 1e9:.2f} GB in a cgroup of {args.cold_limit / 1e6:.0f} MB "
            f"({cg.knob}), page cache dropped before each run, {args.cold_epochs} epoch(s) per run "
            f"all timed, batch {args.batch_size}, load {load0[0]} at the start, "
            f"{loadavg()[0]} at the end")
    print_table("raw-cold", rows, note)
    print_failed(c.failed)
    return {"note": note, "rows": rows, "failed": c.failed, "load": [load0, loadavg()]}


# ---- remote ------------------------------------------------------------------------------------

class S3:
    """tests/remote/s3lib.sh's moto + proxy, started by a bash that waits
    on our pipe: the servers die with it (their PR_SET_PDEATHSIG)."""

    def __init__(self, work):
        script = (f'. "{ROOT}/tests/remote/s3lib.sh"; s3_install >&2 || exit 1; '
                  f's3_start "{work}" >&2 || exit 1; '
                  'for v in S3_ENDPOINT S3_DIRECT S3_BUCKET AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY '
                  'AWS_DEFAULT_REGION; do printf "%s=%s\\n" "$v" "${!v}"; done; echo READY; '
                  'read -r _ || true')
        self.p = subprocess.Popen(["bash", "-c", script], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, text=True, cwd=ROOT)
        self.env = {}
        for line in self.p.stdout:
            line = line.strip()
            if line == "READY":
                break
            k, _, v = line.partition("=")
            self.env[k] = v
        if "S3_ENDPOINT" not in self.env:
            self.p.wait()
            raise RuntimeError("the S3 test server did not start (tests/remote/s3lib.sh; "
                               "see above)")

    def close(self):
        try:
            self.p.stdin.close()
        except OSError:
            pass
        try:
            self.p.wait(30)
        except subprocess.TimeoutExpired:
            self.p.kill()


def upload_dir(s3, local, prefix):
    import boto3
    c = boto3.client("s3", endpoint_url=s3.env["S3_DIRECT"],
                     aws_access_key_id=s3.env["AWS_ACCESS_KEY_ID"],
                     aws_secret_access_key=s3.env["AWS_SECRET_ACCESS_KEY"],
                     region_name=s3.env["AWS_DEFAULT_REGION"])
    for dirpath, _, names in os.walk(local):
        for nm in sorted(names):
            path = os.path.join(dirpath, nm)
            key = f"{prefix}/{os.path.relpath(path, local)}"
            c.upload_file(path, s3.env["S3_BUCKET"], key)


def workload_remote(args):
    want = [p for p in args.peers if p in ("batchd", "litdata", "mds")]
    failed = importable(want)
    peers = [p for p in want if p not in failed]
    n, size = args.samples, args.record_size
    work = os.path.join(args.workdir, f"raw-{n}x{size}")
    d = prepare(work, n, size, peers, failed)
    d["fps_path"] = os.path.join(work, "fps.npy")
    peers = [p for p in peers if p not in failed]
    rwork = os.path.join(args.workdir, "remote")
    shutil.rmtree(rwork, ignore_errors=True)
    os.makedirs(rwork)
    s3 = S3(os.path.join(rwork, "s3"))
    state = {"daemon": None}
    load0 = loadavg()
    try:
        bucket, ep = s3.env["S3_BUCKET"], s3.env["S3_ENDPOINT"]
        for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION"):
            RUNNER.env[k] = s3.env[k]
        RUNNER.env["AWS_REGION"] = s3.env["AWS_DEFAULT_REGION"]
        RUNNER.env["AWS_ENDPOINT_URL"] = ep          # boto3 (litData)
        RUNNER.env["S3_ENDPOINT_URL"] = ep           # Mosaic streaming
        # litData fetches chunks with obstore, whose S3Store it builds without
        # allow_http: against an http:// endpoint every GET fails ("builder
        # error", BadScheme). loaders.open_litdata adds that one option.
        RUNNER.env["BATCHD_PEERS_ALLOW_HTTP"] = "1"
        t0 = time.perf_counter()
        if "batchd" in peers:
            subprocess.run([os.path.join(args.build, "tools", "batchd-pack"), "create",
                            f"s3://{bucket}/batchd/data.bpk", d["raw"], "--endpoint", ep],
                           check=True, stdout=subprocess.DEVNULL, env=RUNNER.env)
        for p in ("litdata", "mds"):
            if p in peers:
                upload_dir(s3, d[p], p)
        log(f"  remote: uploaded in {time.perf_counter() - t0:.1f} s")
        with open(os.path.join(rwork, "s3.credentials"), "w") as f:
            os.fchmod(f.fileno(), 0o600)
            f.write(f"[default]\naws_access_key_id = {s3.env['AWS_ACCESS_KEY_ID']}\n"
                    f"aws_secret_access_key = {s3.env['AWS_SECRET_ACCESS_KEY']}\n")
        conf = os.path.join(rwork, "batchd.conf")
        cache = os.path.join(rwork, "cache")
        with open(conf, "w") as f:
            f.write(f"[datasets]\nremote = s3://{bucket}/batchd\n[remote]\nendpoint = {ep}\n"
                    f"region = {s3.env['AWS_DEFAULT_REGION']}\naddressing = path\n"
                    f"credentials = {os.path.join(rwork, 's3.credentials')}\n"
                    f"[cache]\ndir = {cache}\nmax_size = {2 * n * size // (1 << 20) + 64}M\n")
        sock = os.path.join(rwork, "batchd.sock")

        def spec(p, s):
            sp = base_spec(d, n, size, p, s, None)
            sp.update(warmup=0, epochs=2, socket=sock, dataset="data.bpk", cache_dir=cache)
            if p == "litdata":
                sp["path"] = f"s3://{bucket}/litdata"
            elif p == "mds":
                sp["remote"] = f"s3://{bucket}/mds"
            return sp

        def before(p):
            shutil.rmtree(cache, ignore_errors=True)
            os.makedirs(cache)
            if p == "batchd":
                state["daemon"] = RUNNER.daemon(
                    [os.path.join(args.build, "daemon", "batchd"), "--config", conf,
                     "--socket", sock], sock, os.path.join(rwork, "batchd.log"))

        def after(p):
            stop(state["daemon"])
            state["daemon"] = None

        c = Contest(RUNNER, peers, spec, before, after)
        c.sweep(1)
        c.pairs(args.repeat)
    finally:
        stop(state["daemon"])
        for k in ("AWS_ENDPOINT_URL", "S3_ENDPOINT_URL", "BATCHD_PEERS_ALLOW_HTTP"):
            RUNNER.env.pop(k, None)
        s3.close()
    c.failed.update(failed)
    for r in c.ours + [b for v in c.theirs.values() for _, b in v] + \
            [r for v in c.swept.values() for _, r in v]:
        r["epoch1_s"] = n / r["epoch_s"][0]
        r["epoch2_s"] = n / r["epoch_s"][1]
    out = {"failed": c.failed}
    note = (f"{n} x {size} B in moto's S3 server behind tests/remote's proxy, each loader's "
            f"cache emptied before each run, batch {args.batch_size}, load {load0[0]} at the "
            f"start, {loadavg()[0]} at the end")
    for k, what in (("epoch1_s", "epoch 1, from the bucket"), ("epoch2_s", "epoch 2, from the cache")):
        rows = c.rows(size, metric=k)
        print_table(f"remote: {what}", rows, note)
        out[k] = rows
    print_failed(c.failed)
    out["note"] = note
    out["load"] = [load0, loadavg()]
    return out


# ---- tokens ------------------------------------------------------------------------------------

def warm(paths):
    """Every file under paths read once, so that the runs find them in the
    page cache. @return bytes read."""
    total = 0
    for p in paths:
        files = [p] if os.path.isfile(p) else [os.path.join(dp, nm) for dp, _, nms in os.walk(p)
                                                for nm in nms]
        for f in files:
            with open(f, "rb") as fh:
                while True:
                    b = fh.read(8 << 20)
                    if not b:
                        break
                    total += len(b)
    return total


def row_runs(c, p):
    """The runs a row of c.rows() takes its figures from: batchd's paired
    runs, a peer's side of its pairs, else its best setting's sweep runs."""
    if p == "batchd":
        return c.ours or [x for _, x in c.swept.get("batchd", [])]
    if c.theirs.get(p):
        return [b for _, b in c.theirs[p]]
    return [x for s, x in c.swept[p] if s == c.best[p]]


def token_rows(c):
    """c.rows() for tokens (metric tokens_s): the values as tokens_s, with
    what the runs of each row said (windows/s, dtype, checks, mixture)."""
    rows = c.rows(1)
    for r in rows:
        p = r["peer"]
        runs = row_runs(c, p)
        r["tokens_s"] = r.pop("samples_s")
        r.pop("bytes_s", None)
        r["windows_s"] = med([x["samples_s"] for x in runs])
        r["dtype"] = runs[0].get("dtype")
        r["checked"] = runs[0].get("checked")
        r["setup_s"] = med([x["setup_s"] for x in runs])
        r["check_share"] = med([x.get("check_share", 0) for x in runs])
        if runs[0].get("mix"):
            tot = {}
            for x in runs:
                for k, n in x["mix"].items():
                    tot[k] = tot.get(k, 0) + n
            allw = sum(tot.values())
            r["mix"] = {k: round(n / allw, 4) for k, n in sorted(tot.items())}
            if runs[0].get("twice") is not None:
                r["twice"] = med([x["twice"] for x in runs])
    return rows


def print_token_table(title, rows, note, mix):
    print(f"\n## {title}" + (f" ({note})" if note else ""))
    extra = "share web/code/data" if mix else "checked"
    print(f"| {'loader':<36} | {'best settings':<16} | {'runs':>4} | {'M tokens/s (min-max)':>22} "
          f"| {'dtype':>5} | {'batchd / this: median (min-max)':>31} | {'load':>9} | {extra} |")
    print(f"|{'-' * 38}|{'-' * 18}|{'-' * 6}|{'-' * 24}|{'-' * 7}|{'-' * 33}|{'-' * 11}|"
          f"{'-' * (len(extra) + 2)}|")
    for r in rows:
        if mix:
            m = r.get("mix", {})
            last = "/".join(f"{m.get(s, 0):.3f}" for s in tokens_data.SOURCES)
            if r.get("twice"):
                last += f", {r['twice']:,.0f} windows twice a run"
        else:
            last = r.get("checked") or "-"
        print(f"| {r['loader']:<36} | {r['settings']:<16} | {r['runs']:>4} | "
              f"{mtok(r):>22} | {r['dtype'] or '-':>5} | {ratio_cell(r):>31} | "
              f"{load_cell(r):>9} | {last} |")
    if rows:
        print("  the loop's fingerprints, share of the timed time: " + ", ".join(
            f"{r['peer']} {r['check_share']:.0%}" for r in rows))
    print_sweeps(rows)


def mtok(r):
    """A token row's median and min-max in millions of tokens/s."""
    return f"{r['tokens_s'] / 1e6:.1f} ({r['min'] / 1e6:.1f}-{r['max'] / 1e6:.1f})"


def workload_tokens(args, mix=False):
    """tokens (one source, args.tokens_source, whole epochs) or tokens-mix
    (the three sources by args.tokens_weights, a fixed count of batches),
    page cache warm, every peer over the same ids (tokens_data)."""
    peers = [p for p in args.peers if p in tokens.PEERS]
    failed = importable(peers, tokens)
    peers = [p for p in peers if p not in failed]
    work = os.path.join(args.workdir, "tokens")
    row = args.seq_len + 1
    fmts = sorted({tokens.PEERS[p]["format"] for p in peers} | {"bin"})
    d = tokens_data.prepare_formats(work, row, fmts, args.build, args.seed, log)
    for p in peers:
        f = tokens.PEERS[p]["format"]
        if f in d["failed"]:
            failed[p] = f"writing its format failed: {d['failed'][f]}"
    peers = [p for p in peers if p not in failed]
    names = list(tokens_data.SOURCES) if mix else [args.tokens_source]
    weights = [float(x) for x in args.tokens_weights] if mix else [1.0]
    if len(weights) != len(names):
        raise RuntimeError(f"--tokens-weights: {len(weights)} weights for {len(names)} sources")
    t0 = time.perf_counter()
    nb = warm([d["sources"][s][tokens.PEERS[p]["format"]] for s in names for p in peers])
    log(f"  tokens: {nb / 1e9:.2f} GB read to warm the page cache in "
        f"{time.perf_counter() - t0:.1f} s")
    sock = os.path.join(work, "batchd.sock")
    daemon = None
    load0 = loadavg()
    B = args.tokens_batch_size

    def spec(p, s):
        fmt = tokens.PEERS[p]["format"]
        srcs = []
        for nm in names:
            x = d["sources"][nm]
            srcs.append({"name": nm, "path": x[fmt], "windows": x["windows"],
                         "fps": x["litdata_fps"] if p == "litdata" else x["fps"]})
        return {"kind": "tokens", "peer": p, "settings": s, "mode": "mix" if mix else "single",
                "sources": srcs, "weights": weights, "seq_len": args.seq_len, "row": row,
                "batch_size": B, "seed": args.seed, "warmup": 1, "epochs": args.tokens_epochs,
                "shuffle": args.tokens_shuffle,
                "warm_batches": args.tokens_warm_batches, "batches": args.tokens_batches,
                "epoch_windows": ((args.tokens_warm_batches + args.tokens_batches) * B if mix
                                  else srcs[0]["windows"]),
                "socket": sock}

    def before(p):
        """The peer's files read again: a page cache another process
        dropped meanwhile is warm again (0.3 s a GB when it is not)."""
        t0 = time.perf_counter()
        nb = warm([d["sources"][s][tokens.PEERS[p]["format"]] for s in names])
        dt = time.perf_counter() - t0
        if dt > 0.5 + nb / 1e9:
            log(f"  tokens: warming {p}'s {nb / 1e9:.2f} GB took {dt:.1f} s: the page cache "
                "had been dropped")

    saved = args.workers
    args.workers = args.tokens_workers
    c = Contest(RUNNER, peers, spec, before=before, metric="tokens_s", table=tokens)
    try:
        if "batchd" in peers:
            daemon = RUNNER.daemon([os.path.join(args.build, "daemon", "batchd"), "--socket", sock,
                                    "--root", os.path.dirname(d["sources"][names[0]]["bpk"])],
                                   sock, os.path.join(work, "batchd.log"))
        c.sweep(args.sweep_repeat)
        c.pairs(args.repeat)
    finally:
        args.workers = saved
        stop(daemon)
    c.failed.update(failed)
    rows = token_rows(c)
    co = d["corpus"]
    src_note = ", ".join(f"{s} {co['sources'][s]['tokens'] / 1e6:.1f}M tokens "
                         f"({d['sources'][s]['windows']:,} windows)" for s in names)
    if mix:
        what = (f"mixture {'/'.join(names)} by {'/'.join(f'{w:g}' for w in weights)}: "
                f"{args.tokens_batches} batches timed after {args.tokens_warm_batches}")
    else:
        what = (f"one source: {src_note}; {args.tokens_epochs} timed epoch(s) after 1 warm-up")
    note = (f"{what}; seq_len {args.seq_len} (rows of {row}), batch {B}, batchd shuffle "
            f"{args.tokens_shuffle}, page cache warm, "
            f"{os.cpu_count()} CPUs, load {load0[0]} at the start, {loadavg()[0]} at the end")
    title = "tokens-mix" if mix else f"tokens ({args.tokens_source})"
    print_token_table(title, rows, note, mix)
    print_failed(c.failed, tokens)
    return {"note": note, "rows": rows, "failed": c.failed, "load": [load0, loadavg()],
            "corpus": {k: v for k, v in co.items() if k != "key"}, "sources": names,
            "weights": weights}


# ---- tokens, cold ------------------------------------------------------------------------------

def block_device(path):
    """The /proc/diskstats name of the block device path is on (vda, or
    a partition such as nvme0n1p2), or None."""
    st = os.stat(path)
    try:
        return os.path.basename(os.path.realpath(
            f"/sys/dev/block/{os.major(st.st_dev)}:{os.minor(st.st_dev)}"))
    except OSError:
        return None


def daemon_tier(logpath, name):
    """The tier and read mode the daemon's log last gave dataset name
    ("tier direct, O_DIRECT reads"), or None."""
    last = None
    try:
        with open(logpath, errors="replace") as f:
            for line in f:
                if f"dataset {name}:" in line and "tier" in line:
                    last = line.rsplit(": ", 1)[-1].strip()
    except OSError:
        pass
    return last


def workload_tokens_cold(args):
    """tokens-cold: one epoch of windows of args.tokens_cold_source (default
    all: the three sources end to end) in a memory cgroup of
    args.tokens_cold_limit, the page cache dropped before each run, every
    process of a run in the cgroup (raw-cold's Cgroup); beside it the disk's
    own rate, a sequential read of each loader's files under the same
    conditions, so that tokens/s, the bytes of its files a second and what
    the disk delivered can be set side by side."""
    if os.geteuid() != 0:
        raise RuntimeError("tokens-cold needs root (a memory cgroup, dropping the page cache)")
    peers = [p for p in args.peers if p in tokens.PEERS]
    failed = importable(peers, tokens)
    peers = [p for p in peers if p not in failed]
    work = os.path.join(args.workdir, "tokens")
    row = args.seq_len + 1
    src = args.tokens_cold_source
    fmts = sorted({tokens.PEERS[p]["format"] for p in peers} | {"bin"})
    d = tokens_data.prepare_formats(work, row, fmts, args.build, args.seed, log, sources=(src,))
    for p in peers:
        f = tokens.PEERS[p]["format"]
        if f in d["failed"]:
            failed[p] = f"writing its format failed: {d['failed'][f]}"
    peers = [p for p in peers if p not in failed]
    x = d["sources"][src]
    fmt_bytes = {f: data.du(x[f]) for f in fmts if f in x}
    dev = block_device(x["bin"])
    limit = args.tokens_cold_limit
    small = [f for f, n in fmt_bytes.items() if n <= limit]
    if small:
        log(f"  tokens-cold: {', '.join(small)} of {src} fit(s) the cgroup's limit of "
            f"{limit / 1e6:.0f} MB: not a cold pass from disk alone")
    cg = Cgroup(limit)
    sock = os.path.join(work, "batchd-cold.sock")
    dlog = os.path.join(work, "batchd-cold.log")
    state = {"daemon": None}
    peaks = {}
    load0 = loadavg()
    B = args.tokens_batch_size
    # batchd's --memory: a third of the limit (its own budget would be at
    # least 1 GiB, more than the cgroup holds; half, as in raw-cold, left
    # the trainer too little: torch alone is about 300 MB of anonymous
    # memory, and the cgroup killed it under a 512 MiB limit)
    mem = "auto" if args.cold_batchd_memory == "auto" else (args.cold_batchd_memory or
                                                            f"{limit // 3 >> 20}M")
    if mem != "auto":
        BATCHD_SETTINGS["memory"] = mem

    def spec(p, s):
        fmt = tokens.PEERS[p]["format"]
        return {"kind": "tokens", "peer": p, "settings": s, "mode": "single",
                "sources": [{"name": src, "path": x[fmt], "windows": x["windows"],
                             "fps": x["litdata_fps"] if p == "litdata" else x["fps"]}],
                "weights": [1.0], "seq_len": args.seq_len, "row": row, "batch_size": B,
                "seed": args.seed, "warmup": 0, "epochs": 1, "epoch_windows": x["windows"],
                "shuffle": args.tokens_shuffle,
                "socket": sock, "disk": dev, "procs": cg.procs}

    def enter(p):
        drop_caches()
        RUNNER.cgroup = cg.procs
        cg.reset_peak()
        if p == "batchd":     # a fresh daemon in the cgroup: its memory starts empty too
            m = ["--memory", mem] if mem != "auto" else []
            state["daemon"] = RUNNER.daemon([os.path.join(args.build, "daemon", "batchd"),
                                             "--socket", sock, "--root", os.path.dirname(x["bpk"]),
                                             *m], sock, dlog)

    def leave(p):
        stop(state["daemon"])
        state["daemon"] = None
        RUNNER.cgroup = None
        peaks.setdefault(p, []).append(cg.peak())

    disk = {}       # format: {"buffered": [MB/s], "direct": [MB/s]}

    def disk_round(rep):
        """Each format's files read once buffered and once O_DIRECT, the
        page cache dropped before each read, in the cgroup."""
        for f in sorted(fmt_bytes):
            if not any(tokens.PEERS[p]["format"] == f for p in peers):
                continue
            for mode in ("buffered", "direct"):
                enter(f"disk-{f}")
                try:
                    r = RUNNER.child({"kind": "disk", "paths": [x[f]], "mode": mode},
                                     f"disk {f} {mode}")
                finally:
                    leave(f"disk-{f}-{mode}")
                if "error" not in r:
                    disk.setdefault(f, {}).setdefault(mode, []).append(r["mb_s"])
                    log(f"  disk {rep + 1}: {f} ({r['bytes'] / 1e6:.0f} MB in {r['files']} "
                        f"file(s)), {mode}: {r['mb_s']:.0f} MB/s (load {r['load'][0]})")

    saved = args.workers
    args.workers = args.tokens_cold_workers
    c = Contest(RUNNER, peers, spec, before=enter, after=leave, metric="tokens_s", table=tokens)
    try:
        disk_round(0)
        c.sweep(1)
        c.pairs(args.repeat)
        for rep in range(1, args.repeat):
            disk_round(rep)
    finally:
        args.workers = saved
        BATCHD_SETTINGS.clear()
        stop(state["daemon"])
        RUNNER.cgroup = None
        cg.close()
    c.failed.update(failed)
    rows = token_rows(c)
    for r in rows:
        p, f = r["peer"], tokens.PEERS[r["peer"]]["format"]
        runs = row_runs(c, p)
        r["format"], r["files_mb"] = f, fmt_bytes[f] / 1e6
        r["files_mb_s"] = med([fmt_bytes[f] / q["epoch_s"][0] for q in runs]) / 1e6
        for k in ("disk_read", "dev_read"):
            got = [q for q in runs if (q.get(k) or [None])[0] is not None]
            if got:
                r[f"{k}_mb"] = med([q[k][0] for q in got]) / 1e6
                r[f"{k}_mb_s"] = med([q[k][0] / q["epoch_s"][0] for q in got]) / 1e6
        for mode, v in disk.get(f, {}).items():
            r[f"disk_{mode}_mb_s"] = [med(v), min(v), max(v)]
        pk = [q for q in peaks.get(p, []) if q]
        if pk:
            r["cgroup_peak_mb"] = max(pk) / 1e6
    tier = daemon_tier(dlog, os.path.basename(x["bpk"]))
    note = (f"{src}: {x['tokens'] / 1e6:.1f}M tokens ({x['windows']:,} windows of {row}); "
            + ", ".join(f"{f} {n / 1e6:.0f} MB" for f, n in sorted(fmt_bytes.items()))
            + f"; a memory cgroup of {limit / 1e6:.0f} MB ({cg.knob}), the page cache dropped "
            f"before each run, one epoch a run, timed; batchd --memory {mem}, shuffle "
            f"{args.tokens_shuffle}"
            + (f" ({tier})" if tier else "") + f"; seq_len {args.seq_len}, batch {B}, disk "
            f"{dev or '?'}, {os.cpu_count()} CPUs, load {load0[0]} at the start, "
            f"{loadavg()[0]} at the end")
    print_cold_table(f"tokens-cold ({src})", rows, disk, fmt_bytes, note)
    print_failed(c.failed, tokens)
    return {"note": note, "rows": rows, "failed": c.failed, "load": [load0, loadavg()],
            "disk": disk, "format_bytes": fmt_bytes, "source": src, "limit": limit,
            "tier": tier}


def print_cold_table(title, rows, disk, fmt_bytes, note):
    print(f"\n## {title}" + (f" ({note})" if note else ""))
    print("| loader | best settings | runs | M tokens/s (min-max) | its files | files MB/s "
          "| read from disk in the epoch: MB (MB/s); the machine's MB | disk, its files: buffered / O_DIRECT MB/s "
          "| files MB/s / buffered | batchd / this: median (min-max) | load | cgroup peak MB |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        buf, dio = r.get("disk_buffered_mb_s"), r.get("disk_direct_mb_s")
        dr = (f"{r['disk_read_mb']:.0f} ({r['disk_read_mb_s']:.0f})" if "disk_read_mb" in r
              else "-")
        if "dev_read_mb" in r:
            dr += f"; {r['dev_read_mb']:.0f}"
        seq = f"{buf[0]:.0f} / {dio[0]:.0f}" if buf and dio else "-"
        share = f"{r['files_mb_s'] / buf[0]:.2f}" if buf else "-"
        print(f"| {r['loader']} | {r['settings']} | {r['runs']} | {mtok(r)} | "
              f"{r['format']} {r['files_mb']:.0f} MB | {r['files_mb_s']:.0f} | {dr} | {seq} | "
              f"{share} | {ratio_cell(r)} | {load_cell(r)} | {r.get('cgroup_peak_mb', 0):.0f} |")
    for f in sorted(disk):
        print(f"  disk, {f} ({fmt_bytes[f] / 1e6:.0f} MB): " + ", ".join(
            f"{m} {med(v):.0f} MB/s ({min(v):.0f}-{max(v):.0f}, {len(v)} reads)"
            for m, v in sorted(disk[f].items())))
    if rows:
        print("  the loop's fingerprints, share of the timed time: " + ", ".join(
            f"{r['peer']} {r['check_share']:.0%}" for r in rows))
    print_sweeps(rows)


def workload_resume(args):
    script = os.path.join(HERE, "resume.py")
    if not os.path.exists(script):
        print("\n## resume\n  did not run: tools/peers/resume.py is not there")
        return {"failed": {"resume": "tools/peers/resume.py is not there"}}
    js = os.path.join(args.out, "resume.json")
    p = subprocess.run([sys.executable, script, "--build", args.build, "--workdir",
                        os.path.join(args.workdir, "resume"), "--json", js],
                       env=RUNNER.env, capture_output=True, text=True)
    print("\n## resume (tools/peers/resume.py)")
    print(p.stdout.rstrip())
    out = {"rc": p.returncode, "table": p.stdout}
    if p.returncode:
        print(f"  resume.py exited {p.returncode}: "
              f"{(p.stderr.strip().splitlines() or ['?'])[-1]}")
        out["stderr"] = p.stderr[-4000:]
    try:
        with open(js) as f:
            out["json"] = json.load(f)
    except (OSError, ValueError):
        pass
    return out


# ---- the picture ---------------------------------------------------------------------------------

def plot(results, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    panels = []     # (title, rows, note, the rows' key of the value, its unit)
    for w in ("raw", "raw-cold"):
        if results.get(w, {}).get("rows"):
            panels.append((w, results[w]["rows"], results[w]["note"], "samples_s", "samples/s"))
    if "remote" in results:
        for k, what in (("epoch1_s", "remote, epoch 1 (bucket)"), ("epoch2_s", "remote, epoch 2 (cache)")):
            if results["remote"].get(k):
                panels.append((what, results["remote"][k], results["remote"]["note"],
                               "samples_s", "samples/s"))
    for w in ("tokens", "tokens-mix", "tokens-cold"):
        if results.get(w, {}).get("rows"):
            panels.append((w, results[w]["rows"], results[w]["note"], "tokens_s", "tokens/s"))
    if not panels:
        return None
    fig, axes = plt.subplots(len(panels), 1, figsize=(10, 2.2 + 1.6 * len(panels) +
                                                      0.35 * sum(len(p[1]) for p in panels)))
    if len(panels) == 1:
        axes = [axes]
    for ax, (title, rows, note, key, unit) in zip(axes, panels):
        labels = [f"{r['loader']}\n{r['settings']}" for r in rows]
        v = [r[key] for r in rows]
        err = [[r[key] - r["min"] for r in rows], [r["max"] - r[key] for r in rows]]
        colors = ["#d95f02" if r["peer"] == "batchd" else "#7570b3" for r in rows]
        y = range(len(rows))
        ax.barh(y, v, xerr=err, color=colors, capsize=3)
        ax.set_yticks(list(y), labels, fontsize=8)
        ax.invert_yaxis()
        for i, r in enumerate(rows):
            txt = f"{r[key]:,.0f}/s"
            if "ratio" in r:
                txt += f"   batchd {r['ratio']:.2f}x ({r['ratio_min']:.2f}-{r['ratio_max']:.2f})"
            ax.text(r["max"], i, "  " + txt, va="center", fontsize=8)
        ax.set_xscale("log")
        ax.set_xlim(min(r["min"] for r in rows) / 2, max(r["max"] for r in rows) * 10)
        ax.set_title(f"{title}: {unit}, median (min-max)\n" + textwrap.fill(note, 150),
                     fontsize=8, loc="left")
        ax.set_xlabel(f"{unit} (log scale)", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return path


def weights_arg(s):
    try:
        w = [float(x) for x in s.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{s}': give weights as numbers, 0.7,0.2,0.1") from None
    if any(x < 0 for x in w) or not sum(w) > 0:
        raise argparse.ArgumentTypeError(f"'{s}': weights are >= 0, their sum > 0")
    return w


# ---- main ----------------------------------------------------------------------------------------

def main():
    global ARGS, RUNNER
    bvt = data.bench_vs_torch()
    ap = argparse.ArgumentParser(description="batchd against the loaders people use, side by "
                                 "side on the same data", epilog="tools/peers/README.md")
    ap.add_argument("--workload", default="raw",
                    type=lambda s: bvt.list_arg(s, WORKLOADS + ("all",)),
                    help="raw, raw-cold, remote, resume, tokens, tokens-mix, tokens-cold, all; "
                    "or a list (default raw)")
    ap.add_argument("--build", default="build", help="meson build directory (default build)")
    ap.add_argument("--workdir", help="data and logs, kept for later runs (default a temporary "
                    "directory under /var/tmp, removed)")
    ap.add_argument("--out", help="results.json and peers.png (default WORKDIR/results, or "
                    "./peers-results without --workdir)")
    every = tuple(loaders.PEERS) + tuple(p for p in tokens.PEERS if p not in loaders.PEERS)
    ap.add_argument("--peers", type=lambda s: bvt.list_arg(s, every), default=list(every),
                    help="default: all; each workload runs those of its own: " +
                    ",".join(loaders.PEERS) + "; tokens: " + ",".join(tokens.PEERS))
    ap.add_argument("--samples", type=bvt.count_arg(1), default=20000)
    ap.add_argument("--record-size", type=bvt.size_arg, default=8192)
    ap.add_argument("--batch-size", type=bvt.count_arg(1), default=128)
    ap.add_argument("--epochs", type=bvt.count_arg(1), default=2,
                    help="timed epochs per run, after one warm-up (raw; default 2)")
    ap.add_argument("--repeat", type=bvt.count_arg(1), default=3,
                    help="alternating pairs batchd/peer per peer (default 3)")
    ap.add_argument("--sweep-repeat", type=bvt.count_arg(1), default=1)
    ap.add_argument("--workers", type=bvt.list_arg, default=[0, 1, 2, 4],
                    help="num_workers the DataLoader-based peers sweep (default 0,1,2,4)")
    ap.add_argument("--dali-threads", type=bvt.list_arg, default=[1, 2, 4],
                    help="DALI num_threads to sweep (default 1,2,4)")
    ap.add_argument("--cold-samples", type=bvt.count_arg(1), default=12000)
    ap.add_argument("--cold-record-size", type=bvt.size_arg, default=128 << 10,
                    help="raw-cold: bytes a sample (default 128K: 12000 of them, 1.6 GB)")
    ap.add_argument("--cold-limit", type=bvt.size_arg, default=1 << 30,
                    help="raw-cold: the cgroup's memory limit (default 1G)")
    ap.add_argument("--cold-epochs", type=bvt.count_arg(1), default=1)
    ap.add_argument("--cold-workers", type=bvt.list_arg, default=[2, 4, 8],
                    help="raw-cold: num_workers to sweep (default 2,4,8)")
    ap.add_argument("--cold-batchd-memory", help="raw-cold, tokens-cold: batchd --memory "
                    "(default half the limit, tokens-cold a third; auto: the daemon's own "
                    "budget)")
    ap.add_argument("--seq-len", type=bvt.count_arg(1), default=2048,
                    help="tokens: ids a window feeds the model (rows of seq_len + 1; default 2048)")
    ap.add_argument("--tokens-shuffle", choices=("global", "block"), default="global",
                    help="tokens, tokens-mix, tokens-cold: batchd's shuffle of the windows "
                         "(global, the default: every window anywhere; block: the blocks "
                         "shuffled, then the windows within a window of blocks, as litData's "
                         "chunks and Mosaic's shuffle blocks are: each block read once)")
    ap.add_argument("--tokens-batch-size", type=bvt.count_arg(1), default=32,
                    help="tokens: windows a batch (default 32)")
    ap.add_argument("--tokens-source", default="web", choices=tokens_data.SOURCES,
                    help="tokens: the one source (default web)")
    ap.add_argument("--tokens-weights", type=weights_arg, default=[0.7, 0.2, 0.1],
                    help="tokens-mix: weights of web,code,data (default 0.7,0.2,0.1)")
    ap.add_argument("--tokens-epochs", type=bvt.count_arg(1), default=1,
                    help="tokens: timed epochs per run after one warm-up (default 1)")
    ap.add_argument("--tokens-batches", type=bvt.count_arg(1), default=1800,
                    help="tokens-mix: batches timed per run (default 1800: with the 100 before "
                    "them, web's 0.7 is 42.6k of its 43.6k windows, so that a run needs no "
                    "second pass over a source)")
    ap.add_argument("--tokens-warm-batches", type=bvt.count_arg(0), default=100,
                    help="tokens-mix: batches read before the timed ones (default 100)")
    ap.add_argument("--tokens-workers", type=bvt.list_arg, default=[0, 1, 2, 4],
                    help="tokens: num_workers litData and Mosaic sweep (default 0,1,2,4)")
    ap.add_argument("--tokens-cold-source", default=tokens_data.ALL,
                    choices=tokens_data.SOURCES + (tokens_data.ALL,),
                    help="tokens-cold: the source read (default all: web, code and data end to "
                    "end, 407M tokens, 814 MB of uint16)")
    ap.add_argument("--tokens-cold-limit", type=bvt.size_arg, default=768 << 20,
                    help="tokens-cold: the cgroup's memory limit (default 768M: the trainer's "
                    "torch alone is about 300 MB of it, batchd's --memory a third)")
    ap.add_argument("--tokens-cold-workers", type=bvt.list_arg, default=[0, 2, 4],
                    help="tokens-cold: num_workers litData and Mosaic sweep (default 0,2,4)")
    ap.add_argument("--seed", type=bvt.count_arg(0), default=0)
    ap.add_argument("--run-timeout", type=float, default=900, help="seconds one run may take")
    args = ap.parse_args()
    wl = list(WORKLOADS) if "all" in args.workload else args.workload
    args.build = os.path.abspath(args.build)
    for tool in ("daemon/batchd", "tools/batchd-pack", "client/libbatchclient.so.0"):
        if not os.path.exists(os.path.join(args.build, tool)):
            log(f"peers: {args.build}/{tool} is missing; build first (ninja -C {args.build})")
            return 2
    tmp = args.workdir is None
    args.workdir = os.path.abspath(args.workdir or tempfile.mkdtemp(prefix="peers-",
                                                                     dir="/var/tmp"))
    args.out = os.path.abspath(args.out or (os.path.join(args.workdir, "results") if not tmp
                                            else "peers-results"))
    os.makedirs(args.out, exist_ok=True)
    ARGS = args
    RUNNER = Runner(args)
    os.environ["BATCHCLIENT_LIB"] = RUNNER.env["BATCHCLIENT_LIB"]
    sys.path.insert(0, os.path.join(ROOT, "client", "python"))
    results = {"machine": {"cpus": os.cpu_count(), "load_start": loadavg()},
               "args": {k: v for k, v in vars(args).items()}}
    fns = {"raw": workload_raw, "raw-cold": workload_cold, "remote": workload_remote,
           "resume": workload_resume, "tokens": workload_tokens,
           "tokens-mix": lambda a: workload_tokens(a, mix=True),
           "tokens-cold": workload_tokens_cold}
    rc = 0
    try:
        for w in wl:
            log(f"peers: workload {w}")
            try:
                results[w] = fns[w](args)
            except (RuntimeError, OSError, subprocess.CalledProcessError) as e:
                print(f"\n## {w}\n  FAILED: {e}")
                results[w] = {"error": str(e)}
                rc = 1
            with open(os.path.join(args.out, "results.json"), "w") as f:
                json.dump(results, f, indent=1, default=str)
        results["machine"]["load_end"] = loadavg()
        with open(os.path.join(args.out, "results.json"), "w") as f:
            json.dump(results, f, indent=1, default=str)
        try:
            png = plot(results, os.path.join(args.out, "peers.png"))
        except ImportError as e:
            png = None
            log(f"peers: no plot: {e}")
        print(f"\nresults: {os.path.join(args.out, 'results.json')}" +
              (f", plot: {png}" if png else ""))
    finally:
        if tmp:
            shutil.rmtree(args.workdir, ignore_errors=True)
    return rc


ARGS = RUNNER = None

if __name__ == "__main__":
    if sys.argv[1:] == ["--child"]:
        child_main()
    sys.exit(main())
