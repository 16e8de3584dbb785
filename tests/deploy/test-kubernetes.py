#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The Kubernetes manifests in conf/kubernetes/, read as a cluster would
read them and checked for what makes the deployment work: no cluster is
at hand to apply them, so each thing a wrong manifest would break on a
node is asserted from the parsed YAML instead. batchd and the trainers in
the host's PID and IPC namespaces (GPU streams' CUDA IPC events need
them), one socket directory on the host mounted by both at the path
batchd.conf and BATCHD_SOCKET name, the cache on a hostPath where [cache]
dir points, health probes that run `batchctl status` on that socket,
a grace period longer than batchd's drain, a memory limit above the
budget, no GPU taken from the trainers, a non-root read-only container
without capabilities, the socket group among the trainers' groups,
rank and world from an Indexed Job, every batchd binary a container
runs installed at that path by `meson install --prefix=/usr`, and (where
the build's batchd has remote datasets) the ConfigMap's batchd.conf read
by batchd's own parser without a refusal.

  test-kubernetes.py SOURCE_DIR BUILD_DIR
"""
import json
import os
import re
import subprocess
import sys
import tempfile
import time

import yaml

src, build = sys.argv[1], sys.argv[2]
kdir = os.path.join(src, "conf", "kubernetes")
passed = failed = 0


def check(cond, what):
    global passed, failed
    print(("ok - " if cond else "FAIL - ") + what)
    if cond:
        passed += 1
    else:
        failed += 1
    return cond


def parse_conf(text):
    """batchd.conf as {section: {key: [values]}} (keys may repeat)."""
    conf, sect = {}, None
    for n, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line[0] in "#;":
            continue
        if line.startswith("["):
            sect = conf.setdefault(line.strip("[]"), {})
            continue
        key, eq, value = line.partition("=")
        if not eq or sect is None:
            sys.exit(f"batchd.conf line {n}: not 'key = value' in a section: {line}")
        sect.setdefault(key.strip(), []).append(re.split(r"\s[#;]", value)[0].strip())
    return conf


def kube_bytes(q):
    """A Kubernetes memory quantity (56Gi, 60G, 1000M) in bytes."""
    m = re.fullmatch(r"(\d+)([KMGT]i?)?", q)
    if not m:
        sys.exit(f"not a Kubernetes memory quantity: {q}")
    u = m.group(2) or ""
    return int(m.group(1)) * (1024 if u.endswith("i") else 1000) ** (" KMGT".index(u[0]) if u else 0)


def batchd_bytes(v):
    """A batchd.conf size (48G = 48 GiB, 48 GB = 48e9, 48GiB) in bytes."""
    m = re.fullmatch(r"(\d+)\s*(?:([KMGT])(iB|B)?)?", v, re.I)
    if not m:
        sys.exit(f"not a batchd size: {v}")
    u, suffix = (m.group(2) or "").upper(), (m.group(3) or "").upper()
    return int(m.group(1)) * (1000 if suffix == "B" else 1024) ** (" KMGT".index(u) if u else 0)


docs = {}
for name in sorted(os.listdir(kdir)):
    if name.endswith(".yaml"):
        with open(os.path.join(kdir, name)) as f:
            for d in yaml.safe_load_all(f):
                if d:
                    docs[(d["kind"], d["metadata"]["name"])] = d
check(True, f"parsed {len(docs)} manifests: " + ", ".join(f"{k}/{n}" for k, n in docs))
for (kind, name), d in docs.items():
    check("apiVersion" in d and d["metadata"].get("namespace") == "batchd",
          f"{kind}/{name}: has an apiVersion and lives in namespace batchd")

ds = docs[("DaemonSet", "batchd")]
cm = docs[("ConfigMap", "batchd-config")]
job = docs[("Job", "train")]
conf = parse_conf(cm["data"]["batchd.conf"])
sock = conf["daemon"]["socket"][0]
sock_dir = os.path.dirname(sock)
cache_dir = conf["cache"]["dir"][0]
pod = ds["spec"]["template"]["spec"]
tpod = job["spec"]["template"]["spec"]
batchd_c = next(c for c in pod["containers"] if c["name"] == "batchd")
trainer = tpod["containers"][0]

# The host's PID and IPC namespaces on both sides.
for what, p in (("DaemonSet", pod), ("trainer Job", tpod)):
    check(p.get("hostPID") is True, f"{what}: hostPID: true")
    check(p.get("hostIPC") is True, f"{what}: hostIPC: true")
    check(p.get("nodeSelector") == pod["nodeSelector"] and p.get("tolerations") == pod["tolerations"],
          f"{what}: the GPU nodes' selector and toleration")


def host_mount(p, c, path):
    """(hostPath volume, mount) of container c that puts host path `path` at `path`."""
    vols = {v["name"]: v for v in p.get("volumes", [])}
    for m in c.get("volumeMounts", []):
        v = vols.get(m["name"], {})
        if v.get("hostPath", {}).get("path") == path and m["mountPath"] == path:
            return v, m
    return None, None


# One socket directory on the host, at the path batchd.conf and BATCHD_SOCKET name.
v, m = host_mount(pod, batchd_c, sock_dir)
check(v is not None and not m.get("readOnly"), f"batchd: hostPath {sock_dir} mounted writable at {sock_dir}")
tv, tm = host_mount(tpod, trainer, sock_dir)
check(tv is not None and tv["hostPath"].get("type") == "Directory",
      f"trainer: the same hostPath {sock_dir}, which must exist (type Directory)")
env = {e["name"]: e for e in trainer.get("env", [])}
client_src = "".join(open(os.path.join(src, "client", f)).read()
                     for f in sorted(os.listdir(os.path.join(src, "client"))) if f.endswith(".c"))
check('getenv("BATCHD_SOCKET")' in client_src and env.get("BATCHD_SOCKET", {}).get("value") == sock,
      f"trainer: BATCHD_SOCKET (the variable libbatchclient reads) = [daemon] socket = {sock}")

# The cache on the node, where [cache] dir points.
v, m = host_mount(pod, batchd_c, cache_dir)
check(v is not None and not m.get("readOnly"), f"batchd: [cache] dir {cache_dir} is a writable hostPath")
init = {c["name"]: c for c in pod.get("initContainers", [])}.get("dirs")
if check(init is not None, "an init container makes the hostPath directories batchd's"):
    uid = str(pod["securityContext"]["runAsUser"])
    cmd = init["command"]
    mounts = {m["name"]: m["mountPath"] for m in init["volumeMounts"]}
    vols = {v["name"]: v.get("hostPath", {}).get("path") for v in pod["volumes"]}
    dirs = {vols[n] for n, path in mounts.items() if path in cmd}
    check(cmd[cmd.index("-o") + 1] == uid and cmd[cmd.index("-g") + 1] == uid and dirs == {sock_dir, cache_dir},
          f"init container: {sock_dir} and {cache_dir} owned by uid {uid}")
    check(init["securityContext"]["capabilities"] == {"drop": ["ALL"], "add": ["CHOWN"]},
          "init container: CAP_CHOWN alone")

# batchd reads the ConfigMap's file.
cmd = batchd_c["command"]
cfg_path = cmd[cmd.index("-c") + 1]
mounts = {m["mountPath"]: m["name"] for m in batchd_c["volumeMounts"]}
vols = {v["name"]: v for v in pod["volumes"]}
cfg_vol = vols.get(mounts.get(os.path.dirname(cfg_path)), {})
check(cfg_vol.get("configMap", {}).get("name") == "batchd-config" and os.path.basename(cfg_path) in cm["data"],
      f"batchd -c {cfg_path}: the ConfigMap's {os.path.basename(cfg_path)}")

# Probes: `batchctl status` on the socket (exit 0 answering, 1 not).
want = ["/usr/bin/batchctl", "--socket", sock, "status"]
for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
    got = batchd_c.get(probe, {}).get("exec", {}).get("command")
    check(got == want, f"batchd {probe}: {' '.join(want)}")

# Longer than the drain; a memory limit above the budget.
check(pod.get("terminationGracePeriodSeconds", 30) > 10, "terminationGracePeriodSeconds > 10 s (batchd's drain)")
res = batchd_c["resources"]
limit = kube_bytes(res["limits"]["memory"])
budget = batchd_bytes(conf["memory"]["budget"][0])
check(limit >= budget + (2 << 30) and res["requests"]["memory"] == res["limits"]["memory"],
      f"memory limit {res['limits']['memory']} = request, at least 2 GiB above [memory] budget "
      f"{conf['memory']['budget'][0]}")
check(all("nvidia.com/gpu" not in res.get(k, {}) for k in ("requests", "limits")) and
      pod.get("runtimeClassName") == "nvidia" and
      {e["name"]: e.get("value") for e in batchd_c["env"]}.get("NVIDIA_VISIBLE_DEVICES") == "all",
      "batchd sees every GPU through the NVIDIA runtime and requests none")
check(trainer["resources"]["limits"].get("nvidia.com/gpu") == 1 and tpod.get("runtimeClassName") == "nvidia",
      "each trainer rank requests one GPU, through the NVIDIA runtime")

# Credentials: from the Secret through the environment, since batchd.conf names no file.
benv = {e["name"]: e for e in batchd_c["env"]}
check("credentials" not in conf.get("remote", {}) and
      all(benv.get(k, {}).get("valueFrom", {}).get("secretKeyRef", {}).get("name") == "batchd-s3"
          for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")),
      "the bucket's keys from Secret batchd-s3 in batchd's environment, no credentials file")
check(conf["datasets"]["remote"][0].startswith("s3://"), f"[datasets] remote = {conf['datasets']['remote'][0]}")

# The sandbox.
sc, psc = batchd_c["securityContext"], pod["securityContext"]
check(psc.get("runAsNonRoot") is True and psc.get("runAsUser", 0) != 0 and
      sc.get("readOnlyRootFilesystem") is True and sc.get("allowPrivilegeEscalation") is False and
      sc.get("capabilities") == {"drop": ["ALL"]} and not sc.get("privileged"),
      f"batchd: uid {psc.get('runAsUser')}, read-only root, no privilege escalation, no capabilities")
tsc = tpod["securityContext"]
check(int(conf["daemon"]["socket_group"][0]) in tsc.get("supplementalGroups", []) and
      conf["daemon"]["socket_mode"][0] == "0660",
      f"trainer: in the socket's group {conf['daemon']['socket_group'][0]} (mode 0660)")

# Rank and world from the Indexed Job.
spec = job["spec"]
check(spec.get("completionMode") == "Indexed" and spec["completions"] == spec["parallelism"],
      "the Job is Indexed, all ranks at once")
check(env["RANK"]["valueFrom"]["fieldRef"]["fieldPath"] ==
      "metadata.annotations['batch.kubernetes.io/job-completion-index']" and
      int(env["WORLD_SIZE"]["value"]) == spec["completions"],
      "RANK = the completion index, WORLD_SIZE = completions (the Python Loader's defaults)")
tcmd = trainer["command"]
check(tcmd[tcmd.index("--rank") + 1] == "$(RANK)" and tcmd[tcmd.index("--world") + 1] == "$(WORLD_SIZE)",
      "the trainer's command takes --rank $(RANK) --world $(WORLD_SIZE)")

# Every batchd binary a container runs, where `meson install --prefix=/usr` puts it.
intro = json.loads(subprocess.run(["meson", "introspect", build, "--installed", "--buildoptions"],
                                  capture_output=True, text=True, check=True).stdout)
prefix = next(o["value"] for o in intro["buildoptions"] if o["name"] == "prefix")
installed = {"/usr" + p[len(prefix):] for p in intro["installed"].values() if p.startswith(prefix + "/")}
# From the image's Debian base (coreutils), not from batchd.
base = {"/usr/bin/install"}
for (kind, name), d in docs.items():
    p = d.get("spec", {}).get("template", {}).get("spec")
    for c in (p or {}).get("initContainers", []) + (p or {}).get("containers", []):
        runs = [c["command"][0]] + [c.get(k, {}).get("exec", {}).get("command", [None])[0]
                                    for k in ("startupProbe", "livenessProbe", "readinessProbe")]
        for b in filter(None, runs):
            check(b in installed or b in base, f"{kind}/{name} {c['name']}: {b} is "
                  + ("installed by meson install --prefix=/usr" if b in installed else "the base image's"))

# The ConfigMap's batchd.conf through the daemon's own parser, where the
# build's batchd has remote datasets (--cache-dir): any FILE:LINE in what
# it says is a key or value it refuses. The socket, cache and budget are
# overridden by flags (the node's paths and 48G are not this machine's);
# reaching the bucket is not asked.
batchd = os.path.join(build, "daemon", "batchd")
if "--cache-dir" in subprocess.run([batchd, "--help"], capture_output=True, text=True).stdout:
    with tempfile.TemporaryDirectory() as t:
        cfg = os.path.join(t, "batchd.conf")
        with open(cfg, "w") as f:
            f.write(cm["data"]["batchd.conf"])
        sock = os.path.join(t, "batchd.sock")
        d = subprocess.Popen([batchd, "-c", cfg, "--socket", sock, "--cache-dir", os.path.join(t, "cache"),
                              "--memory", "64M", "--root", t], stderr=subprocess.PIPE, text=True)
        up = False
        for _ in range(200):
            up = os.path.exists(sock)
            if up or d.poll() is not None:
                break
            time.sleep(0.05)
        d.terminate()
        err = d.communicate(timeout=30)[1]
        refused = re.search(re.escape(cfg) + r":\d+:.*", err)
        check(not refused, "batchd reads the ConfigMap's batchd.conf without a FILE:LINE refusal"
              + (", and listens" if up else f" (it exited: {err.strip()[-200:]})" if not refused
                 else f": {refused.group(0)}"))
else:
    print("note: this batchd has no remote datasets (no --cache-dir): the ConfigMap's batchd.conf "
          "is not run through its parser")
print("note: no Kubernetes cluster here: the manifests are parsed and checked, not applied")
print(f"{passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
