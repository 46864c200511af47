"""`rocm-stack dashboard [--write | --out FILE]`: the Grafana dashboard JSON (domain/dashboard.py).

`--write` rewrites the committed `monitoring/dashboards/rocm-gpus.json` (tests/test_monitoring.py fails when it
drifts), which Docker setups provision into Grafana.

Exit codes: 0 printed or written; 2 `--out` names an existing file (without `--write`) or the file cannot be
written, or a usage error.
"""

from __future__ import annotations

import argparse
import sys

from domain.dashboard import DASHBOARD_FILE, dashboard_json_text
from tools.output import add_output_options, emit, exit_codes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="rocm-stack dashboard", description=__doc__.splitlines()[0], epilog=exit_codes(__doc__)
    )
    add_output_options(parser, DASHBOARD_FILE)
    return emit(dashboard_json_text(), parser.parse_args(argv), DASHBOARD_FILE)


if __name__ == "__main__":
    sys.exit(main())
