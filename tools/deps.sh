# SPDX-License-Identifier: MIT
# Sourced by tools/demo.sh and tools/test.sh: install the Debian packages
# batchd needs to build and test, only those missing. As root through
# apt-get; otherwise through sudo.

BATCHD_DEPS=(
	gcc pkg-config meson ninja-build
	liburing-dev libzstd-dev libuv1-dev check libxxhash-dev libinih-dev
	libarchive-dev libsystemd-dev libmicrohttpd-dev libjson-c-dev
	libcurl4-openssl-dev libxml2-dev
	zstd tar gzip python3 python3-venv python3-numpy python3-xxhash python3-torch python3-pil adwaita-icon-theme strace
	prometheus   # promtool: the alerting rules and the metrics checked in tests/prometheus
	patchelf     # tests/gpu/bundle.sh: the GPU bundle's RPATH
	python3-yaml shellcheck   # tests/deploy: the Kubernetes manifests, the Slurm scripts
	curl         # tests/remote: uploads and probes signed with --aws-sigv4
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

# Node.js and npm, for the S3 server of the remote-dataset tests (s3rver,
# installed by tests/remote/s3lib.sh s3_install). Debian's nodejs and npm
# only when the commands are missing: a machine with NodeSource's nodejs
# package has npm inside it and no deb "npm", and Debian's npm would
# conflict with it, so neither is in BATCHD_DEPS.
batchd_install_node() {
	local missing=()
	command -v node >/dev/null 2>&1 || missing+=(nodejs)
	command -v npm >/dev/null 2>&1 || missing+=(npm)
	batchd__apt_install "${missing[@]}"
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
