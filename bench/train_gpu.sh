#!/usr/bin/env bash
# Measures programs/train.py on one GPU with the nccl backend (RCCL on ROCm) and drills kill + resume there.
# Usage: bench/train_gpu.sh OUTDIR   (writes OUTDIR/*.jsonl, rank 0's JSON lines; prints a summary)
set -uo pipefail
out=${1:?output directory}
mkdir -p "$out"
ckpt=$(mktemp -d)
run() { python3 -m torch.distributed.run --standalone --nproc-per-node 1 programs/train.py --backend nccl \
          --hidden-size 1024 --layers 8 --batch-size 8192 --checkpoint-dir "$ckpt" "$@"; }
export PYTHONUNBUFFERED=1 PYTHONWARNINGS=ignore

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "hip", torch.version.hip,
           "nccl", torch.cuda.nccl.version())'

# Throughput: bf16 autocast (600 steps, checkpoints every 200, their time kept out of samples/s), fp32 (100 steps).
run --precision bf16 --steps 600 --checkpoint-every 200 >"$out/bf16.jsonl"; echo "bf16 rc=$?"
rm -rf "$ckpt"/*
run --precision fp32 --steps 100 --checkpoint-every 0 >"$out/fp32.jsonl"; echo "fp32 rc=$?"

# Failure drill on the GPU: the only rank dies after step 70, the restart resumes from checkpoint 50.
rm -rf "$ckpt"/*
run --precision bf16 --steps 100 --checkpoint-every 50 --fail-at-step 70 >"$out/drill-killed.jsonl" 2>/dev/null
echo "drill killed rc=$?"
run --precision bf16 --steps 100 --checkpoint-every 50 >"$out/drill-resumed.jsonl"; echo "drill resumed rc=$?"
ls -l "$ckpt"

python3 - "$out" <<'PY'
import json, sys, pathlib
for path in sorted(pathlib.Path(sys.argv[1]).glob("*.jsonl")):
    events = [json.loads(line) for line in path.read_text().splitlines() if line.startswith("{")]
    steps = [e for e in events if e["event"] == "step"]
    if not steps:
        continue
    done = [e for e in events if e["event"] == "done"]
    ckpts = [e["seconds"] for e in events if e["event"] == "checkpoint"]
    resume = [e["step"] for e in events if e["event"] == "resume"]
    print(f"{path.name}: steps {steps[0]['step']}..{steps[-1]['step']} loss {steps[0]['loss']:.4f} -> "
          f"{steps[-1]['loss']:.4f}, mean samples/s {done[0]['mean_samples_per_s'] if done else None}, "
          f"median step {sorted(e['step_time_s'] for e in steps)[len(steps) // 2] * 1e3:.2f} ms, "
          f"checkpoint s {ckpts}, resumed from {resume}")
PY
