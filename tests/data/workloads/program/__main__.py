"""Test stand-in: the real __main__.py plus the workloads wiring, run by components.synth.synthesize.

It adds what the lead adds to the real program (see /work/notes/readme-workloads.md): the StackConfig fields
`kubernetes`, `gpuFleet`, `training` and `inference` (only those the root model lacks), their problems(),
the Hugging Face token check, and the wiring. tests/test_workloads.py runs the real project as soon as
StackConfig has `training`; delete this folder then.
"""
import os
from pathlib import Path
from unittest import mock

import pulumi
import pydantic

import components.config as config
from components.config import ConfigError, ConfigProblem, StackConfig, from_pulumi
from components.config import kubernetes as kubernetes_section
from components.config import workloads as workloads_section
from components.gpu_host import GpuHost, GpuHostArgs
from components.kubernetes import build_kubernetes
from components.workloads import build_workloads, host_for_gpu_host

# Stack files name files relative to the real project (hosts[].topology): run from there, as the real program does.
os.chdir(Path(__file__).resolve().parents[4])

NEW_FIELDS = {
    "kubernetes": (kubernetes_section.KubernetesConfig | None, None),
    "gpu_fleet": (workloads_section.GpuFleet | None, None),
    "training": (list[workloads_section.TrainingConfig], []),
    "inference": (list[workloads_section.InferenceConfig], []),
}
WithWorkloads = pydantic.create_model(
    "StackConfig", __base__=StackConfig,
    **{name: spec for name, spec in NEW_FIELDS.items() if name not in StackConfig.model_fields},
)
lead_cross_checks = config._cross_checks


def cross_checks(cfg):
    yield from lead_cross_checks(cfg)
    if "kubernetes" not in StackConfig.model_fields:
        yield from kubernetes_section.problems(cfg)
    yield from workloads_section.problems(cfg)


try:
    with mock.patch.object(config, "StackConfig", WithWorkloads), mock.patch.object(config, "_cross_checks",
                                                                                    cross_checks):
        cfg, secrets = from_pulumi()
    secret_names = {"huggingfaceToken"} if secrets.huggingface_token is not None else set()
    missing = [ConfigProblem(p, m) for p, m in workloads_section.secret_problems(cfg, secret_names)]
    if missing:
        raise ConfigError(missing)
except ConfigError as error:
    raise pulumi.RunError(str(error)) from None

hosts = {
    host.name: GpuHost(GpuHostArgs(
        host=host_for_gpu_host(cfg, host),
        images=cfg.images,
        security_profile=cfg.security_profile,
        registry=cfg.registry,
        registry_password=secrets.registry_password,
    ))
    for host in cfg.hosts
}
k8s = build_kubernetes(cfg.kubernetes, cfg.environment) if cfg.kubernetes is not None else None
workloads = build_workloads(cfg, secrets, k8s, hosts)

pulumi.export("environment", cfg.environment)
pulumi.export("dockerHosts", {name: host.provider.host for name, host in hosts.items()})
pulumi.export("workloads", workloads.outputs())
