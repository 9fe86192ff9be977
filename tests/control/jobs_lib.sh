# Checks on `gpool jobs ls -o json` output shared by the control-plane shell tests (sourced).

# Prints "OK" or a complaint: no (node, gpu) held by two running jobs.
check_no_double() {
  python3 -c '
import json,sys
d=json.load(sys.stdin); seen={}
for j in d.get("jobs",[]):
  if j["state"]!="running": continue
  for a in j.get("allocations",[]):
    for g in range(16):
      if a.get("gpu_mask",0)>>g&1:
        k=(a["node"],g)
        if k in seen: print("GPU %s/%d bound to %s and %s"%(k[0],g,seen[k],j["id"])); sys.exit()
        seen[k]=j["id"]
print("OK")'
}
# Prints how many jobs are in state $1.
count_state() { python3 -c "import json,sys; print(sum(1 for j in json.load(sys.stdin).get('jobs',[]) if j['state']=='$1'))"; }
