"""The upper bound of every count, size and length of the stack configuration (and the placement lock), with why.

Each bound is far above what a real fleet writes; it is there so that a typo (`count: 1000000000`, a CPU list
`0-99999999999`) is refused in milliseconds, with the key and the bound, instead of running synth for minutes or
exhausting memory. pydantic checks them while it reads the value, before anything is built from it; the host
groups' members are counted before they are expanded (schema/groups.py expand). tests/test_bounds.py holds every
count, size and length of the schema to having one.
"""

from __future__ import annotations

from domain.gpus import MAX_GPUS_PER_HOST

# Docker hosts of one stack, `hosts` and every host group's members together. Synth takes about 35 ms and 1.7 MB of
# memory per 8-GPU host (measured here with a 200-member group: 7.7 s, 415 MB), so 1024 hosts synthesize in well
# under a minute; a larger fleet is several stacks (one per cluster or rack row), each with its own `pulumi up`.
MAX_HOSTS = 1024
# The number in a host group's `namePattern` (`start` + member index): a fleet numbered past a million is a typo.
MAX_HOST_INDEX = 10**6

# Kubernetes' tested limits: "No more than 5,000 nodes", "No more than 150,000 total pods"
# (kubernetes.io/docs/setup/best-practices/cluster-large/). Node counts (training nodes, profile nodes, upgrade
# parallelism) stay under the first, pod counts (replicas) under the second.
MAX_NODES = 5000
MAX_PODS = 150_000

# Entries of a list or mapping a person writes by hand: containers of a host, command arguments, environment
# variables, ports, volumes, labels, tolerations, taints, namespaces, image families, workloads, profiles.
MAX_ITEMS = 1024

# Text of one value: Linux refuses a single argument or environment string of MAX_ARG_STRLEN (131072 bytes, 32 pages)
# or more (include/uapi/linux/binfmts.h), and every text of the stack ends up in one or is far shorter.
MAX_TEXT = 131072

# Bytes of a memory size (shm, memory limits, log files): 64 TiB is what x86-64's 4-level page tables address
# (46-bit physical addresses, Linux Documentation/arch/x86/x86_64/mm.rst), more than any server of the fleet holds.
MAX_BYTES = 64 * 1024**4

# CPU numbers (cpusets, NUMA CPU lists): x86-64 Linux builds at most 8192 CPUs (arch/x86/Kconfig NR_CPUS_RANGE_END
# "default 8192 if MAXSMP"); NUMA nodes at most 1 << NODES_SHIFT = 1024 (arch/x86/Kconfig NODES_SHIFT range 1 10).
MAX_CPUS = 8192
MAX_NUMA_NODES = 1024

# GPU indices of one host: 0 .. MAX_GPUS_PER_HOST - 1 (domain/gpus.py).
MAX_GPU_INDEX = MAX_GPUS_PER_HOST - 1

# Seconds anything of the stack waits for (Helm releases, drains, pod deletion, a job's deadline): a step that takes
# longer than a day is hung, not slow (the same bound as schema/types.py WaitSeconds).
MAX_WAIT_SECONDS = 86400
# How long a pod keeps running on a node tainted NoExecute (tolerationSeconds): a year is "for good".
MAX_TOLERATION_SECONDS = 365 * 86400

# Retries of a failed training (Docker restarts, the Job's backoffLimit): past a thousand it is a crash loop.
MAX_RETRIES = 1000
# Training steps, batch size and checkpoint counts passed to the training program: a billion steps at ten a second
# is three years.
MAX_STEPS = 10**9
MAX_BATCH = 1 << 20
# The checks' performance floors (TFLOPS, GB/s) and the alerts' error-count thresholds: a million is three orders of
# magnitude above what any GPU or link reaches, so a larger floor can never pass and is a typo.
MAX_FLOOR = 10**6
# A Job's activeDeadlineSeconds: the pod spec's own bound, 1 .. math.MaxInt32 (kubernetes pkg/apis/core/validation/
# validation.go ValidatePodSpec, "activeDeadlineSeconds" InclusiveRangeError(1, math.MaxInt32)), 68 years.
MAX_DEADLINE_SECONDS = 2**31 - 1
# NCCL_IB_GID_INDEX: a port's GID table index is a byte (rdma-core libibverbs/verbs.h struct ibv_global_route
# `uint8_t sgid_index`).
MAX_GID_INDEX = 255
