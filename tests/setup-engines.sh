#!/usr/bin/env bash
# Installs the real engines the test suite starts for itself (on loopback, in its own dirs):
# dockerd and containerd for the container runtimes, sshd for SSH-reached hosts, and Debian's
# chromium with its chromium-driver for the dashboard's browser tests (never a downloaded browser).
# Idempotent and quick when they are already there; needs root and Debian's apt.
set -euo pipefail
need=()
command -v dockerd >/dev/null 2>&1 || need+=(docker.io)
command -v containerd >/dev/null 2>&1 || need+=(containerd)
[ -x /usr/sbin/sshd ] || need+=(openssh-server)
command -v ssh-keygen >/dev/null 2>&1 || need+=(openssh-client)
command -v docker-compose >/dev/null 2>&1 || need+=(docker-compose)  # validates docker-compose.yml
[ -x /usr/bin/chromium ] || need+=(chromium)
[ -x /usr/bin/chromedriver ] || need+=(chromium-driver)
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" != 0 ]; then
    echo "setup-engines: need root to install ${need[*]} (tests that need them will skip)" >&2
    exit 0
  fi
  echo "setup-engines: installing ${need[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null
  apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
