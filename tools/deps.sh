# SPDX-License-Identifier: MIT
# Sourced by tools/demo.sh and tools/test.sh: install the Debian packages
# batchd needs to build and test, only those missing. As root through
# apt-get; otherwise through sudo.

BATCHD_DEPS=(
	gcc pkg-config meson ninja-build
	liburing-dev libzstd-dev libuv1-dev check libxxhash-dev libinih-dev
	libarchive-dev libsystemd-dev libmicrohttpd-dev libjson-c-dev
	libcurl4-openssl-dev libxml2-dev
	libjpeg62-turbo-dev libspng-dev libwebp-dev   # lib/image: the decoders
	zstd tar gzip python3 python3-venv python3-numpy python3-xxhash python3-torch python3-pil adwaita-icon-theme strace
	prometheus   # promtool: the alerting rules and the metrics checked in tests/prometheus
	patchelf     # tests/gpu/bundle.sh: the GPU bundle's RPATH
	python3-yaml shellcheck   # tests/deploy: the Kubernetes manifests, the Slurm scripts
	slurmctld slurmd slurm-client munge   # tests/deploy: conf/slurm on a one-machine Slurm cluster
	curl         # tests/remote: uploads and probes signed with --aws-sigv4
	scdoc man-db # docs/man: the man pages, and their rendering checked by tests/cli (man)
)

batchd_install_deps() {
	local missing=() pkg
	for pkg in "${BATCHD_DEPS[@]}" "$@"; do
		dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' ||
			missing+=("$pkg")
	done
	batchd__apt_install "${missing[@]}"
}

# apt-get install PKG... (nothing when none), as root or through sudo.
batchd__apt_install() {
	[ $# -eq 0 ] && return 0
	echo "installing: $*"
	local sudo=()
	[ "$(id -u)" -eq 0 ] || sudo=(sudo)
	"${sudo[@]}" apt-get update -q
	DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -q --no-install-recommends "$@"
}

# Python packages from PyPI live in virtual environments of their own, one per
# requirements file, under $BATCHD_VENV_DIR (default ~/.cache/batchd/venv):
# outside the checkout, so that another clone on the machine (CI's) reuses
# them instead of downloading again.
batchd_venv_root() {
	printf '%s\n' "${BATCHD_VENV_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/batchd/venv}"
}

# batchd_venv NAME REQUIREMENTS: the venv NAME with exactly the pinned
# packages of the file REQUIREMENTS, made with Debian's python3 (its
# python3-venv is in BATCHD_DEPS) when missing or when the file's
# requirements (its lines but comments and blank ones) changed since;
# prints its directory. Concurrent callers wait for each other
# (flock); a failed install leaves no venv behind that looks finished.
batchd_venv() {
	local name=$1 req=$2 root dir want rc=0
	root=$(batchd_venv_root)
	dir="$root/$name"
	want=$(grep -v -e '^[[:space:]]*#' -e '^[[:space:]]*$' "$req" | sha256sum | cut -d' ' -f1) || return
	mkdir -p -- "$root" || return
	(
		flock 9 || exit 1
		[[ -x $dir/bin/python && $(cat "$dir/.batchd-requirements" 2>/dev/null) == "$want" ]] && exit 0
		echo "batchd_venv: making $dir from $req (pip, from PyPI)" >&2
		rm -rf -- "$dir"
		local t0=$SECONDS
		/usr/bin/python3 -m venv "$dir" &&
			"$dir/bin/python" -m pip install -q --disable-pip-version-check --upgrade pip &&
			"$dir/bin/python" -m pip install -q --disable-pip-version-check -r "$req" || {
			echo "batchd_venv: pip install -r $req failed (is PyPI reachable?)" >&2
			rm -rf -- "$dir"
			exit 1
		}
		printf '%s\n' "$want" >"$dir/.batchd-requirements"
		echo "batchd_venv: $dir ready in $((SECONDS - t0)) s, $(du -sh "$dir" | cut -f1)" >&2
	) 9>"$root/.$name.lock" || rc=$?
	[[ $rc -eq 0 ]] && printf '%s\n' "$dir"
	return "$rc"
}

# meson setup DIR ARGS..., reconfiguring a directory that already exists.
batchd_setup() {
	local dir=$1
	shift
	if [ -f "$dir/build.ninja" ]; then
		meson setup --reconfigure "$dir" "$@" >/dev/null
	else
		meson setup "$dir" "$@" >/dev/null
	fi
}
