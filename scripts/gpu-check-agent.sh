#!/usr/bin/env bash
# Real-GPU check of the node agent's NVML discovery (src/agent/nvml.cc), called by
# scripts/gpu-check.sh and runnable alone: `gpool agent --discover` must find every GPU that
# nvidia-smi lists, with the same UUIDs, PCI bus ids and memory sizes, and read telemetry
# (temperature; power where the board reports it).
#
#   scripts/gpu-check-agent.sh [BUILD_DIR]      (default: build; must hold bin/gpool)
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$here/build}
gpool=$build/bin/gpool
die() { echo "gpu-check-agent: $*" >&2; exit 1; }
command -v nvidia-smi >/dev/null || die "nvidia-smi not found: this check needs an NVIDIA GPU"
[[ -x $gpool ]] || die "$gpool missing: build first"

echo "== node agent: NVML discovery (gpool agent --discover)"
json=$("$gpool" agent --discover --name gpu-check)
smi=$(nvidia-smi --query-gpu=uuid,pci.bus_id,memory.total --format=csv,noheader,nounits)
python3 - "$json" "$smi" <<'PY'
import json, sys
node = json.loads(sys.argv[1])
smi = [l.split(", ") for l in sys.argv[2].strip().splitlines()]
ok = True
def check(cond, what):
    global ok
    print(("ok   " if cond else "FAIL ") + what)
    ok &= cond
check(node.get("gpus", 0) == len(smi), f"{node.get('gpus', 0)} GPUs found, nvidia-smi lists {len(smi)}")
check(node.get("gpu_uuids", []) == [s[0] for s in smi], "UUIDs match nvidia-smi, in order")
bus = [a.get("pci_bus_id", "") for a in node.get("affinity", [])]
# nvidia-smi prints 00000000:1B:00.0 (8-digit domain); gpool 0000:1b:00.0 (hwloc style).
want = [s[1].lower()[4:] for s in smi]
check(bus == want, f"PCI bus ids {bus} match {want}")
mem = int(node.get("gpu_memory_bytes", 0)) >> 20
check(abs(mem - int(smi[0][2])) <= 1, f"GPU memory {mem} MiB, nvidia-smi {smi[0][2]} MiB")
tel = node.get("telemetry", [])
check(len(tel) == len(smi) and all(t.get("temperature_c", 0) > 0 for t in tel), "temperature read for every GPU")
print("     power (W):", [t.get("power_w", 0) for t in tel], " model:", node.get("gpu_model"))
print("     HCAs:", [(h["device"], h.get("rate"), h.get("state")) for h in node.get("hcas", [])])
print("     affinity:", [(a["gpu"], a.get("hca"), a.get("distance")) for a in node.get("affinity", [])])
sys.exit(0 if ok else 1)
PY
echo "gpu-check-agent: NVML discovery agrees with nvidia-smi"
