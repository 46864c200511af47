"""`rocm-stack alerts [--stack STACK] [--out FILE]`: write the GPU alert rules as a Prometheus rules file.

Without `--stack` it writes the MI300X defaults to the committed `monitoring/rules/gpu-alerts.rules.yml`
(tests/test_monitoring_alerts.py fails when that file drifts); with it, the rules of that stack's
`rocm-stack:monitoring`.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from domain.alerts import RULES_FILE, rules_file_text
from schema.monitoring import MonitoringConfig
from tools.synth import stack_config


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="rocm-stack alerts", description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=RULES_FILE, help="rules file to write (default: the committed one)")
    parser.add_argument("--stack", help="use `rocm-stack:monitoring` of stacks/Pulumi.STACK.yaml (default: defaults)")
    args = parser.parse_args(argv)
    cfg = MonitoringConfig()
    if args.stack:
        cfg = MonitoringConfig.model_validate(stack_config(args.stack).get("rocm-stack:monitoring") or {})
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(rules_file_text(cfg), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
