#!/usr/bin/env bash
# Installs the Debian 12 packages gpool needs to build and test. Idempotent: when every package is
# already installed it returns at once without touching apt.
# Usage: setup.sh [fuzz]   -- `fuzz` adds clang and its libFuzzer runtime (`make fuzz` only: CI's
# `make test`/`test-asan` use g++, and clang/LLVM is ~330 MB to unpack on a fresh machine).
set -euo pipefail

PACKAGES=(
  build-essential cmake ninja-build pkg-config git
  libgtest-dev libgmock-dev libbenchmark-dev
  libfmt-dev libspdlog-dev nlohmann-json3-dev libcli11-dev libyaml-cpp-dev
  libzstd-dev liblz4-dev libsqlite3-dev libssl-dev
  nettle-dev                           # MD2/HMAC: the CUDA runtime's integrity check (libcuda.so.1 stand-in)
  libucx-dev ucx-utils                 # UCX transport (tcp, shared memory, verbs)
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler libcpp-httplib-dev  # control plane
  curl python3                         # control-plane e2e test and demo
  # InfiniBand management plane in software (ibsim) with the real SM and diags; verbs and hwloc
  # for the agent's discovery.
  ibsim-utils opensm infiniband-diags rdma-core libibumad-dev libibmad-dev libibnetdisc-dev
  libopensm-dev libibverbs-dev libhwloc-dev
  etcd-server etcd-client              # HA store backend, tested against a real 3-member cluster
  chromium                             # dashboard test in headless Chromium
  # Slurm integration: the SPANK plugin builds against libslurm-dev and is tested with real
  # daemons (tests/slurm).
  slurmctld slurmd slurm-client munge libslurm-dev
)
for group in "$@"; do
  case "$group" in
  fuzz) PACKAGES+=(clang libclang-rt-14-dev) ;;  # libFuzzer targets
  *) echo "setup.sh: unknown package group '$group' (known: fuzz)" >&2; exit 2 ;;
  esac
done

missing=()
for p in "${PACKAGES[@]}"; do
  if ! grep -q "install ok installed" <<<"$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null)"; then
    missing+=("$p")
  fi
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

echo "setup: installing ${missing[*]}"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
APT_OPTS=()
if [ -n "${GPOOL_CI:-}" ]; then
  # A throwaway CI machine (.ci/run sets GPOOL_CI): dpkg need not fsync every unpacked file, and
  # the man-page index need not be rebuilt after the install. Never on a machine that is kept.
  APT_OPTS+=(-o Dpkg::Options::=--force-unsafe-io)
  echo "man-db man-db/auto-update boolean false" | $SUDO debconf-set-selections
fi
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends "${APT_OPTS[@]}" "${missing[@]}"
