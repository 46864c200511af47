#!/usr/bin/env bash
# The one-GPU numbers of bench/gpu/README.md in one go (device tool): gpucheck twice, the training program's
# regression configuration (68.2M parameters) and a larger one (554M parameters) in bf16.
# Usage: bench/gpu/h200.sh OUTDIR
set -uo pipefail
out=${1:?output directory}
mkdir -p "$out"
export PYTHONUNBUFFERED=1 PYTHONWARNINGS=ignore NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "nccl", torch.cuda.nccl.version())'
for run in 1 2; do
  python3 -m programs.gpucheck --expect-gpus 1 --min-tflops 573 --json >"$out/gpucheck-h200-$run.json"
  echo "gpucheck run $run rc=$?"
done
ckpt=$(mktemp -d)
train() { python3 -m torch.distributed.run --standalone --nproc-per-node 1 programs/train.py --backend nccl \
            --batch-size 8192 --precision bf16 --checkpoint-dir "$ckpt" "$@"; }
train --hidden-size 1024 --layers 8 --steps 600 --checkpoint-every 200 >"$out/train-bf16-h200.jsonl"
echo "train 1024x8 rc=$?"
rm -rf "$ckpt"/*
train --hidden-size 4096 --layers 4 --steps 200 --checkpoint-every 0 >"$out/train-bf16-h4096-h200.jsonl"
echo "train 4096x4 rc=$?"
nvidia-smi --query-gpu=clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv,noheader
