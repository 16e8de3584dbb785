#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The Kubernetes manifests in conf/kubernetes/, read as a cluster would
read them and checked for what makes the deployment work. No cluster is
at hand to apply them, so each is validated against the Kubernetes API's
schema (kubernetes-validate, which carries the schemas offline, in a
venv of tests/deploy/requirements.txt that tools/deps.sh batchd_venv
makes; the API of KUBERNETES_VERSION, strict: no field the API does not
know), beside two broken copies that must be refused, and each thing a
wrong manifest would break on a node is asserted from the parsed YAML:
batchd and the trainers in the host's PID and IPC namespaces (GPU
streams' CUDA IPC events need them), one socket directory on the host
mounted by both at the path batchd.conf and BATCHD_SOCKET name, the
cache on a hostPath where [cache] dir points, health probes that run
`batchctl status` on that socket, a grace period longer than batchd's
drain, a memory limit above the budget, no GPU taken from the trainers,
a non-root read-only container without capabilities, the socket group
among the trainers' groups, rank and world from an Indexed Job, every
batchd binary a container runs installed at that path by `meson install
--prefix=/usr`, and (where the build's batchd has remote datasets) the
ConfigMap's batchd.conf read by batchd's own parser without a refusal.

The image they run, conf/kubernetes/Containerfile, cannot be built here
(no registry): it is checked for what can be checked without building
it. Its bases are Debian 12; every path it COPYs exists, and meson
configures the tree those COPYs make with the options of its RUN line,
installing the programs the manifests run where they run them; its build
stage installs tools/deps.sh's packages as tools/deps.sh does (all of
them with -dev in the name, the tool chain, nothing else); its image
stage installs the package of every library that the installed programs
and libraries of this build load (readelf, ldd, dpkg-query), each a
package of this Debian; its tag, label, user and command are those of
the manifests and the project.

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

# The Kubernetes API the manifests are checked against: the newest whose
# schemas kubernetes-validate 1.37.0 carries (1.25 .. 1.37).
KUBERNETES_VERSION = "1.37.0"

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

# Against the API's schema, in a venv of kubernetes-validate (made here when
# missing: a failure to make it fails the test, it does not skip it).
VALIDATE = r"""
import json, sys
from importlib.metadata import version
import kubernetes_validate as kv
req = json.load(sys.stdin)
res = []
for label, doc in req["docs"]:
    try:
        res.append([label, "valid", kv.validate(doc, req["version"], strict=True)])
    except kv.ValidationError as e:
        res.append([label, "invalid", "/".join(map(str, e.absolute_path)) + ": " + e.message])
    except Exception as e:
        res.append([label, "error", f"{type(e).__name__}: {e}"])
print(json.dumps({"package": version("kubernetes-validate"), "results": res}))
"""
venv = subprocess.run(["bash", "-c", '. "$1/tools/deps.sh" && batchd_venv k8s-validate "$1/tests/deploy/requirements.txt"',
                       "bash", src], capture_output=True, text=True)
if check(venv.returncode == 0, "the venv of kubernetes-validate (tools/deps.sh batchd_venv k8s-validate)"
         + ("" if venv.returncode == 0 else ": " + venv.stderr.strip()[-300:])):
    # The broken copies: a field the API does not have, and one of the wrong type.
    bad_field = json.loads(json.dumps(docs[("DaemonSet", "batchd")]))
    bad_field["spec"]["template"]["spec"]["hostPid"] = True
    bad_type = json.loads(json.dumps(docs[("Job", "train")]))
    bad_type["spec"]["completions"] = "four"
    req = {"version": KUBERNETES_VERSION,
           "docs": [[f"{k}/{n}", d] for (k, n), d in docs.items()]
           + [["DaemonSet/batchd with hostPid", bad_field], ["Job/train with completions: four", bad_type]]}
    run = subprocess.run([os.path.join(venv.stdout.strip(), "bin", "python"), "-c", VALIDATE],
                         input=json.dumps(req), capture_output=True, text=True)
    if check(run.returncode == 0, "kubernetes-validate ran" + ("" if run.returncode == 0 else ": " + run.stderr[-300:])):
        got = json.loads(run.stdout)
        res = {label: (state, why) for label, state, why in got["results"]}
        for (kind, name) in docs:
            state, why = res[f"{kind}/{name}"]
            check(state == "valid" and why == KUBERNETES_VERSION.rsplit(".", 1)[0],
                  f"{kind}/{name}: valid against the schema of Kubernetes {why} (kubernetes-validate "
                  f"{got['package']}, strict)" + ("" if state == "valid" else f": {state}: {why}"))
        state, why = res["DaemonSet/batchd with hostPid"]
        check(state == "invalid" and "hostPid" in why, f"a DaemonSet with hostPid (not hostPID) is refused: {why}")
        state, why = res["Job/train with completions: four"]
        check(state == "invalid" and "completions" in why, f"a Job with completions: four is refused: {why}")

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

# ---- conf/kubernetes/Containerfile, the image they run, checked without building it ----
# (no registry here to pull debian:12 from). Instructions, continuation
# lines joined, comments dropped.
with open(os.path.join(kdir, "Containerfile")) as f:
    cf_text = f.read()
instrs = []
for line in re.sub(r"\\\n", " ", cf_text).splitlines():
    if line.strip() and not line.lstrip().startswith("#"):
        word, _, rest = line.strip().partition(" ")
        instrs.append((word.upper(), rest.strip()))
stages = []  # [base image, [instructions]]
for word, rest in instrs:
    if word == "FROM":
        stages.append([rest.split()[0], []])
    elif stages:
        stages[-1][1].append((word, rest))
check([b for b, _ in stages] == ["debian:12", "debian:12-slim"],
      "Containerfile: a build stage FROM debian:12, the image FROM debian:12-slim")


def apt_packages(stage):
    """The packages a stage's RUN lines apt-get install, and whether every apt-get install there is
    tools/deps.sh's (noninteractive, -y -q --no-install-recommends)."""
    pkgs, as_deps = [], True
    for word, rest in stage[1]:
        for cmd in re.split(r"&&|;", rest) if word == "RUN" else []:
            argv = cmd.split()
            if "apt-get" in argv and "install" in argv:
                as_deps &= all(o in argv for o in ("-y", "-q", "--no-install-recommends")) and \
                    "DEBIAN_FRONTEND=noninteractive" in argv
                pkgs += [a for a in argv[argv.index("install") + 1:] if not a.startswith("-")]
    return pkgs, as_deps and bool(pkgs)


# The build stage: tools/deps.sh's packages, every -dev one (what the build
# links) and the tool chain, nothing it does not install.
deps = subprocess.run(["bash", "-c", '. "$1/tools/deps.sh" && printf "%s\\n" "${BATCHD_DEPS[@]}"', "bash", src],
                      capture_output=True, text=True, check=True).stdout.split()
build_pkgs, how = apt_packages(stages[0])
need = {p for p in deps if p.endswith("-dev")} | {"gcc", "pkg-config", "meson", "ninja-build"}
check(how, "Containerfile build stage: apt-get install -y -q --no-install-recommends, noninteractive, as tools/deps.sh")
check(set(build_pkgs) <= set(deps) and need <= set(build_pkgs),
      f"Containerfile build stage: {len(build_pkgs)} packages, all in tools/deps.sh's list and all its "
      f"-dev ones and the tool chain" + (f"; not in deps.sh: {sorted(set(build_pkgs) - set(deps))}, "
                                         f"missing: {sorted(need - set(build_pkgs))}"
                                         if not (set(build_pkgs) <= set(deps) and need <= set(build_pkgs)) else ""))

# Every path COPY names exists (in the context: the repository's root); the
# tree they make is one meson configures with the RUN line's options, and
# it installs what the manifests run.
copies, setup = [], None
for word, rest in stages[0][1]:
    if word == "COPY" and not rest.startswith("--"):
        *srcs, dest = rest.split()
        copies += [(p, dest.rstrip("/") + "/" + os.path.basename(p) if dest.endswith("/") else dest) for p in srcs]
    if word == "RUN" and "meson setup" in rest:
        setup = rest.split("meson setup", 1)[1].split("&&")[0].split()
missing = [p for p, _ in copies if not os.path.exists(os.path.join(src, p))]
check(copies and not missing, f"Containerfile: the {len(copies)} paths it COPYs exist"
      + (f"; missing: {missing}" if missing else ""))
if check(setup is not None and setup[:2] == ["/build", "/src"] and all(d.startswith("/src/") for _, d in copies),
         f"Containerfile: meson setup /build /src {' '.join((setup or [])[2:])}, on what COPY put in /src"):
    with tempfile.TemporaryDirectory() as t:
        for p, dest in copies:
            to = os.path.join(t, "src", dest[len("/src/"):])
            os.makedirs(os.path.dirname(to), exist_ok=True)
            subprocess.run(["cp", "-a", os.path.join(src, p), to], check=True)
        conf_run = subprocess.run(["meson", "setup", os.path.join(t, "build"), os.path.join(t, "src")] + setup[2:],
                                  capture_output=True, text=True)
        ok_conf = check(conf_run.returncode == 0, "Containerfile: meson configures the copied tree with its options"
                        + ("" if conf_run.returncode == 0 else ": " + (conf_run.stdout + conf_run.stderr)[-400:]))
        if ok_conf:
            image_files = json.loads(subprocess.run(["meson", "introspect", os.path.join(t, "build"), "--installed"],
                                                    capture_output=True, text=True, check=True).stdout).values()
            runs = {c["command"][0] for d in docs.values()
                    for c in (d.get("spec", {}).get("template", {}).get("spec") or {}).get("containers", [])}
            check(runs <= set(image_files), f"Containerfile: its meson install puts {', '.join(sorted(runs))} "
                  "where the manifests' containers run them")

# The image stage: the package of every library that the installed
# programs and libraries of this build load directly, other than glibc
# (the base image's) and the build's own; and nothing this machine's
# Debian does not have (each is installed here, by tools/deps.sh's
# packages). Libraries that no Debian package owns (a CUDA toolkit
# outside apt) are said: the image is built with -Dcuda=disabled.
run_pkgs, how = apt_packages(stages[-1])
check(how, "Containerfile image stage: apt-get install -y -q --no-install-recommends, noninteractive")
elfs = [p for p in intro["installed"] if os.path.isfile(p) and open(p, "rb").read(4) == b"\x7fELF"]
needed, unowned = {}, set()
for elf in elfs:
    names = re.findall(r"\(NEEDED\)\s+Shared library: \[(.*)\]",
                       subprocess.run(["readelf", "-d", elf], capture_output=True, text=True).stdout)
    where = dict(re.findall(r"^\s*(\S+) => (\S+)", subprocess.run(["ldd", elf], capture_output=True,
                                                                      text=True).stdout, re.M))
    for n in names:
        path = where.get(n)
        if not path or os.path.realpath(path).startswith(os.path.realpath(build) + "/"):
            continue
        own = subprocess.run(["dpkg-query", "-S", os.path.realpath(path)], capture_output=True, text=True)
        if own.returncode != 0:
            own = subprocess.run(["dpkg-query", "-S", path], capture_output=True, text=True)
        if own.returncode != 0:
            unowned.add(n)
            continue
        pkg = own.stdout.split(":")[0]
        if pkg != "libc6":
            needed.setdefault(pkg, set()).add(n)
lacking = {p: sorted(n) for p, n in needed.items() if p not in run_pkgs}
check(needed and not lacking,
      f"Containerfile image stage: installs the packages of the {sum(map(len, needed.values()))} libraries "
      f"the installed programs load ({', '.join(sorted(needed))})" + (f"; lacking: {lacking}" if lacking else ""))
unknown = [p for p in run_pkgs
           if "install ok installed" not in subprocess.run(["dpkg-query", "-W", "-f=${Status}", p],
                                                           capture_output=True, text=True).stdout]
check(not unknown, "Containerfile image stage: each package is Debian 12's, installed here"
      + (f"; not: {unknown}" if unknown else ""))
if unowned:
    print(f"note: {', '.join(sorted(unowned))}: from no Debian package (this build's CUDA); the image builds "
          "with -Dcuda=disabled")
check("-Dcuda=disabled" in (setup or []), "Containerfile: -Dcuda=disabled (no CUDA toolkit among Debian 12's packages)")

# The image the manifests run is the one it builds: the tag in its build
# command, the project's version in its label; its user and command the
# DaemonSet's.
version = json.loads(subprocess.run(["meson", "introspect", build, "--projectinfo"], capture_output=True,
                                    text=True, check=True).stdout)["version"]
tag = re.search(r"build -f conf/kubernetes/Containerfile -t (\S+) \.", cf_text)
images = {c["image"] for d in docs.values() for p in [(d.get("spec", {}).get("template", {}).get("spec") or {})]
          for c in p.get("initContainers", []) + p.get("containers", [])}
check(tag is not None and images == {tag.group(1)} == {f"batchd:{version}"},
      f"every container runs image batchd:{version}, the tag the Containerfile's build command gives "
      f"(images: {sorted(images)})")
label = dict(re.findall(r'(\S+)="([^"]*)"', next((r for w, r in stages[-1][1] if w == "LABEL"), "")))
check(label.get("org.opencontainers.image.version") == version,
      f"Containerfile: org.opencontainers.image.version {label.get('org.opencontainers.image.version')}, "
      f"the project's {version}")
user = next((r for w, r in stages[-1][1] if w == "USER"), "")
image_cmd = json.loads(next((r for w, r in stages[-1][1] if w == "CMD"), "null"))
check(user == f"{psc['runAsUser']}:{psc['runAsGroup']}" and image_cmd == batchd_c["command"],
      f"Containerfile: USER {user} and CMD {image_cmd}, the DaemonSet's runAsUser:runAsGroup and command")

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
print("note: no Kubernetes cluster here: the manifests are validated and checked, not applied")
print(f"{passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
