#!/usr/bin/env bash
# make emulation: lets this machine run the other architecture's programs
# (arm64's on amd64, amd64's on arm64) through Debian's qemu-user-static,
# registered in binfmt_misc with the F flag (the interpreter opened when it
# is registered, so it works inside containers too), so that make images
# builds the server images for both: Debian's server packages run their
# install scripts in the image's architecture.
#
# It installs qemu-user-static when missing and mounts binfmt_misc when it
# is not. The registration is the kernel's, for every program of the
# machine, until it restarts (or echo -1 > /proc/sys/fs/binfmt_misc/qemu-ARCH).
# Where the kernel refuses (an unprivileged container), it says so and
# succeeds: make images then builds the server images for this machine's
# architecture alone, and says so too.
set -euo pipefail
if [ "$(id -u)" != 0 ]; then
  exec sudo "$0" "$@"
fi
host=$(dpkg --print-architecture)
case $host in
  amd64) target=arm64 q=aarch64 ;;
  arm64) target=amd64 q=x86_64 ;;
  *) echo "emulation: this machine is $host; the images are built on amd64 or arm64" >&2; exit 0 ;;
esac
binfmt=/proc/sys/fs/binfmt_misc
registered() { [ -f "$binfmt/qemu-$q" ] && [ "$(head -1 "$binfmt/qemu-$q")" = enabled ]; }
skip() {
  echo "emulation: $*; make images builds the server images for linux/$host alone" >&2
  exit 0
}

if registered; then
  echo "emulation: linux/$target programs run here (qemu-$q in binfmt_misc)" >&2
  exit 0
fi
if [ ! -f /usr/lib/binfmt.d/qemu-$q.conf ]; then
  echo "emulation: installing Debian's qemu-user-static" >&2
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq qemu-user-static >/dev/null
fi
# Where systemd runs, installing it registered the interpreters already.
if ! registered; then
  [ -f "$binfmt/register" ] || mount -t binfmt_misc binfmt_misc "$binfmt" 2>/dev/null ||
    skip "the kernel refused to mount binfmt_misc (an unprivileged container?)"
  conf=$(grep -v '^#' /usr/lib/binfmt.d/qemu-$q.conf | head -1)
  # The F flag: the interpreter is opened now, so containers need no copy.
  case ${conf##*:} in *F*) ;; *) conf=${conf}F ;; esac
  printf '%s' "$conf" >"$binfmt/register" 2>/dev/null || skip "the kernel refused to register qemu-$q"
fi
registered || skip "qemu-$q is not enabled in $binfmt"
echo "emulation: linux/$target programs run here (qemu-$q registered in binfmt_misc)" >&2
