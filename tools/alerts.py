"""`rocm-stack alerts [--stack STACK] [--write | --out FILE]`: the GPU alert rules as a Prometheus rules file.

Without `--stack`: the MI300X defaults, i.e. the committed `monitoring/rules/gpu-alerts.rules.yml`
(tests/test_monitoring_alerts.py fails when that file drifts; `--write` rewrites it). With `--stack`: the rules of
that stack's `rocm-stack:monitoring` and the series of what it declares of its Docker hosts (GPU counts, partitions:
domain/alerts.py declared_rules), its config checked as `pulumi up` checks it.

Exit codes: 0 printed or written; 2 the stack configuration was refused, `--out` names an existing file (without
`--write`) or the file cannot be written, or a usage error.
"""

from __future__ import annotations

import argparse
import sys

from components.monitoring import declared_fleet
from domain.alerts import RULES_FILE, rules_file_text
from schema import ConfigError, decode, load
from schema.monitoring import MonitoringConfig
from schema.stackfile import StackFileError, as_program_config
from tools.output import add_output_options, emit, exit_codes
from tools.synth import stack_config


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="rocm-stack alerts", description=__doc__.splitlines()[0], epilog=exit_codes(__doc__)
    )
    parser.add_argument("--stack", help="use `rocm-stack:monitoring` of stacks/Pulumi.STACK.yaml (default: defaults)")
    add_output_options(parser, RULES_FILE)
    args = parser.parse_args(argv)
    if not args.stack:
        return emit(rules_file_text(MonitoringConfig(), ()), args, RULES_FILE)
    try:
        values, secret_keys = as_program_config(stack_config(args.stack))
        stack = load(
            args.stack, {key: decode(value) for key, value in values.items()}, secret_keys, place_unlocked=True
        )
    except (StackFileError, ConfigError) as refused:
        print(refused, file=sys.stderr)
        return 2
    return emit(rules_file_text(stack.monitoring, declared_fleet(stack)), args, RULES_FILE)


if __name__ == "__main__":
    sys.exit(main())
