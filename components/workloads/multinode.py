"""A vLLM replica over several nodes (`inference[].kubernetes.nodes` > 1): one LeaderWorkerSet group per replica.

Each group is a leader pod, which runs vLLM's API server and engine, and `nodes - 1` worker pods, which run vLLM's
headless workers: vLLM's own multi-node launch of the pinned 0.11.2 (its multiprocessing executor over
torch.distributed, no Ray cluster), `vllm serve ... --nnodes N --node-rank R --master-addr ADDR`, rank 0 on the
leader, `--headless` on the others (vllm/engine/arg_utils.py L757-760, vllm/entrypoints/cli/serve.py L53-54 and
L114-127, vllm/distributed/parallel_state.py L1180-1186 @ v0.11.2). vLLM's LWS page shows the older Ray launch
(examples/online_serving/multi-node-serving.sh, docs/deployment/frameworks/lws.md), whose script sits in
/vllm-workspace of the CUDA image only; the native launch needs nothing beyond `vllm` itself.

LeaderWorkerSet (kubernetes-sigs/lws v0.10.0, api/leaderworkerset/v1/leaderworkerset_types.go) gives every pod
LWS_LEADER_ADDRESS (`<leader pod>.<lws>.<namespace>`, a headless Service the controller creates) and
LWS_WORKER_INDEX (0 on the leader), labels them `leaderworkerset.sigs.k8s.io/name` and `.../worker-index`, and
restarts and rolls a group as a whole.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pulumi_kubernetes.core import v1 as core_v1

LWS_API_VERSION = "leaderworkerset.x-k8s.io/v1"
LWS_KIND = "LeaderWorkerSet"
# Labels the LWS pod webhook puts on every pod of a group (leaderworkerset_types.go L37, L45 @ v0.10.0; the leader's
# worker index is 0, pkg/webhooks/pod_webhook.go L141).
SET_NAME_LABEL = "leaderworkerset.sigs.k8s.io/name"
WORKER_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/worker-index"
LEADER_WORKER_INDEX = "0"
# Environment the LWS pod webhook adds to every container (leaderworkerset_types.go L67-75, pkg/utils/pod/pod_utils.go
# L144); Kubernetes expands `$(NAME)` in a command from the container's environment.
LEADER_ADDRESS_ENV = "LWS_LEADER_ADDRESS"
WORKER_INDEX_ENV = "LWS_WORKER_INDEX"
POD_IP_ENV = "POD_IP"
# vLLM's address of this process for its peers (vllm/utils/network_utils.py get_ip L33-44 @ v0.11.2: VLLM_HOST_IP
# first, else the address of the default route's interface).
HOST_IP_ENV = "VLLM_HOST_IP"
# `pulumi up` waits for every group ready and updated: the controller sets Available only then
# (pkg/controllers/leaderworkerset_controller.go L494-503 @ v0.10.0); pulumi-kubernetes awaits no custom resource
# unless told how (provider/pkg/metadata/overrides.go ReadyCondition: the `pulumi.com/waitFor` annotation).
WAIT_FOR = {"pulumi.com/waitFor": "condition=Available"}


def group_env() -> list[core_v1.EnvVarArgs]:
    """The pod's own IP (downward API) as vLLM's host address: the leader binds its message queue on `--master-addr`
    (vllm/distributed/device_communicators/shm_broadcast.py L294-304 @ v0.11.2: `remote_socket.bind(tcp://<ip>:port)`),
    and ZeroMQ binds an interface or address, not a DNS name such as LWS_LEADER_ADDRESS."""
    return [
        core_v1.EnvVarArgs(
            name=POD_IP_ENV,
            value_from=core_v1.EnvVarSourceArgs(field_ref=core_v1.ObjectFieldSelectorArgs(field_path="status.podIP")),
        ),
        core_v1.EnvVarArgs(name=HOST_IP_ENV, value=f"$({POD_IP_ENV})"),
    ]


def _launch(nodes: int, rank: str, master: str) -> list[str]:
    # The multiprocessing executor explicitly: vLLM 0.11.2 picks it by default for nnodes > 1 on CUDA only
    # (vllm/config/parallel.py L560) and refuses nnodes > 1 with any other (L599-602).
    return [
        "--distributed-executor-backend",
        "mp",
        "--nnodes",
        str(nodes),
        "--node-rank",
        rank,
        "--master-addr",
        master,
    ]


def leader_command(serve: Sequence[str], nodes: int) -> list[str]:
    """`vllm serve` as node rank 0: the API server, the engine and the first node's workers; the torch.distributed
    store listens on its own address."""
    return [*serve, *_launch(nodes, "0", f"$({POD_IP_ENV})")]


def worker_command(serve: Sequence[str], nodes: int) -> list[str]:
    """`vllm serve --headless` as node rank LWS_WORKER_INDEX: workers only, joining the leader's process group
    (serve.py L114-127 @ v0.11.2: node_rank_within_dp > 0 runs the headless multiproc executor)."""
    return [*serve, *_launch(nodes, f"$({WORKER_INDEX_ENV})", f"$({LEADER_ADDRESS_ENV})"), "--headless"]


# The workers' preStop: wait while the leader answers /health (its pod port: the proxy's, which forwards /health
# without a key, or vLLM's own), i.e. until the leader has finished its requests (its own preStop) and stopped.
WORKER_DRAIN = (
    "import os, time, urllib.request\n"
    "while True:\n"
    "    try:\n"
    "        urllib.request.urlopen('http://' + os.environ['"
    + LEADER_ADDRESS_ENV
    + "'] + ':{port}/health', timeout=5)\n"
    "    except Exception:\n"
    "        break\n"
    "    time.sleep(1)\n"
)


def worker_drain_hook(port: int) -> core_v1.LifecycleArgs:
    """A worker gets SIGTERM only after its leader stopped: a worker gone first would break the requests the leader
    is still finishing (its drain, autoscaling.drain_hook), within the same grace."""
    return core_v1.LifecycleArgs(
        pre_stop=core_v1.LifecycleHandlerArgs(
            exec_=core_v1.ExecActionArgs(command=["python3", "-c", WORKER_DRAIN.format(port=port)])
        )
    )


def leader_selector(labels: dict[str, str]) -> dict[str, str]:
    """The leader pods of the workload's groups: where the API is served (the Service's selector)."""
    return {**labels, WORKER_INDEX_LABEL: LEADER_WORKER_INDEX}


def leader_worker_set_spec(
    replicas: int, nodes: int, leader: core_v1.PodTemplateSpecArgs, worker: core_v1.PodTemplateSpecArgs
) -> dict[str, Any]:
    return {
        "replicas": replicas,
        # Workers are created with the leader, not once it is Ready: the leader's vLLM is ready only after every
        # worker joined its process group, so LeaderReady (workers created after the leader pod is ready,
        # pod_controller.go L143-146 @ v0.10.0) would never start them.
        "startupPolicy": "LeaderCreated",
        # Like the Deployment's: one group at a time, no surge group (it would need GPUs a full fleet lacks); the
        # next group is updated once the previous one (leader and workers) is ready (leaderworkerset_types.go
        # RollingUpdateStrategyType, rollingUpdateParameters in leaderworkerset_controller.go L286-379).
        "rolloutStrategy": {
            "type": "RollingUpdate",
            "rollingUpdateConfiguration": {"maxUnavailable": 1, "maxSurge": 0},
        },
        "leaderWorkerTemplate": {
            "size": nodes,
            # A worker lost or restarted breaks the leader's process group: the whole group is recreated (the leader
            # deleted with foreground propagation, its workers' StatefulSet with it; pod_controller.go L204-266).
            "restartPolicy": "RecreateGroupOnPodRestart",
            "leaderTemplate": leader,
            "workerTemplate": worker,
        },
    }
