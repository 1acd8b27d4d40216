#!/usr/bin/env bash
# Issue 10's bar, checked as closely as this machine allows: on a fresh Debian bookworm (python3 3.11,
# as on the Space) with only python3, make and git -- no python3-venv, no pip, nothing installed by
# hand -- the README's `make test` passes from a clean clone and leaves `git status` clean.
# It builds a minimal chroot with debootstrap (kept as a base and copied afresh for every run), clones
# this repo's HEAD (committed work only) into it with ../shared beside it, and runs the command as root.
#
#   usage (root): scripts/fresh_debian_check.sh              # the whole suite: make test
#                 scripts/fresh_debian_check.sh PYTEST_ARGS  # make install, then pytest PYTEST_ARGS
#   env: FRESH_BASE (base system, default /var/tmp/esp-fresh-debian), KEEP=1 keeps the run's tree.
set -euo pipefail
repo=$(git -C "$(dirname "$0")/.." rev-parse --show-toplevel)
base=${FRESH_BASE:-/var/tmp/esp-fresh-debian}
[ "$(id -u)" = 0 ] || { echo "run as root (debootstrap, chroot, mount)"; exit 2; }

if [ ! -f "$base/.complete" ]; then
  command -v debootstrap >/dev/null || {
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null; }
  # ca-certificates comes along with git or python3 in a normal `apt-get install` (Recommends);
  # minbase skips Recommends, so it is named here.
  rm -rf "$base"
  debootstrap --variant=minbase --include=python3,make,git,ca-certificates \
    bookworm "$base" http://deb.debian.org/debian >/dev/null
  touch "$base/.complete"
fi

work=$(mktemp -d /var/tmp/esp-fresh-run.XXXXXX)
root=$work/root
cleanup() {
  for m in "$root/opt/wheels" "$root/dev" "$root/proc"; do
    mountpoint -q "$m" && umount -R "$m"
  done
  [ "${KEEP:-}" = 1 ] && echo "kept $work" || rm -rf "$work"
}
trap cleanup EXIT
cp -a "$base" "$root"

# What belongs to this machine and its network, not to the project: DNS, this sandbox's egress CA
# (HTTPS to PyPI goes through it), and the CPU torch wheel that torch==2.13.0 resolves to on this
# kind of machine (PIP_FIND_LINKS; without it pip would pull the multi-GB CUDA build).
cp /etc/resolv.conf "$root/etc/resolv.conf"
if ls /usr/local/share/ca-certificates/*.crt >/dev/null 2>&1; then
  cp /usr/local/share/ca-certificates/*.crt "$root/usr/local/share/ca-certificates/"
  chroot "$root" update-ca-certificates >/dev/null 2>&1
fi
pip_env=()
while IFS= read -r v; do pip_env+=("$v"); done < <(env | grep -E '^PIP_(FIND_LINKS|CERT|DEFAULT_TIMEOUT)=' || true)
if [ -d /opt/wheels ]; then
  mkdir -p "$root/opt/wheels" && mount --bind -o ro /opt/wheels "$root/opt/wheels"
fi
mount -t proc proc "$root/proc"
mount --rbind /dev "$root/dev"

# A clean clone, with the shared folder beside it as the README and the tests expect.
git clone -q --no-local "$repo" "$root/src/esp-explorer"
cp -a "$repo/../shared" "$root/src/shared"

if [ $# = 0 ]; then cmd='make test'; else cmd="make install && .venv/bin/python -m pytest $*"; fi
echo "== $(date -u '+%F %T UTC'): fresh bookworm, $(chroot "$root" python3 --version), commit $(git -C "$repo" rev-parse --short HEAD): $cmd"
start=$(date +%s)
rc=0
chroot "$root" /usr/bin/env -i HOME=/root LANG=C.UTF-8 CI=true "${pip_env[@]}" \
  PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
  bash -c "cd /src/esp-explorer && $cmd" </dev/null || rc=$?
echo "== exit $rc after $(( $(date +%s) - start )) s"
dirty=$(chroot "$root" git -C /src/esp-explorer status --porcelain)
[ -z "$dirty" ] && echo "== git status: clean" || { echo "== git status NOT clean:"; echo "$dirty"; rc=1; }
exit $rc
