"""The monitoring host's prometheus.yml names the keyed hosts' vLLM jobs in `scrape_config_files`, which Prometheus
has since 2.43 (prometheus/prometheus v2.43.0 config/config.go L222 `ScrapeConfigFiles ... yaml:"scrape_config_files"`;
v2.42.0 has no such field). The stack runs v3.5.0 (docker_host.PROMETHEUS_IMAGE), which reads each file on every
configuration load, startup and SIGHUP alike (v3.5.0 config/config.go L324-365 GetScrapeConfigs: every glob's files
read and their jobs appended to prometheus.yml's, a job name twice refused; scrape/manager.go L251 ApplyConfig and
cmd/prometheus/main.go L976, the reloaders, call it).

The tests run Debian's prometheus 2.42 (bookworm's; `.ci/run` installs it), whose strict YAML refuses the key. Where
the binary is older than 2.43 the tests hand it the configuration 2.43 builds (`inlined`: the files' jobs appended to
prometheus.yml's) and say so; a newer binary gets the configuration as uploaded.
"""

from __future__ import annotations

import fnmatch
import re
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

FIRST = (2, 43)


def version(binary: str) -> tuple[int, int]:
    """`prometheus --version` / `promtool --version`: "prometheus, version 2.42.0+ds (...)"."""
    result = subprocess.run([binary, "--version"], capture_output=True, text=True, check=True)
    match = re.search(r"version (\d+)\.(\d+)\.", result.stdout + result.stderr)
    assert match, result.stdout + result.stderr
    return int(match.group(1)), int(match.group(2))


def takes_flags(binary: str, flags: Sequence[str], tmp_path: Path) -> tuple[bool, str]:
    """Whether `binary` takes `flags`, and its output: it parses its flags before it reads its configuration, so
    started on a missing configuration it stops at the one or the other."""
    result = subprocess.run(
        [binary, f"--config.file={tmp_path}/absent.yml", f"--storage.tsdb.path={tmp_path}", *flags],
        capture_output=True,
        text=True,
        timeout=30,
    )
    output = result.stdout + result.stderr
    assert "Error loading config" in output or "Error parsing commandline arguments" in output, output
    return "Error parsing commandline arguments" not in output, output


def reads_scrape_config_files(binary: str) -> bool:
    return version(binary) >= FIRST


def inlined(config: Mapping[str, Any], files: Mapping[str, str]) -> dict[str, Any]:
    """prometheus.yml with the jobs of the `scrape_config_files` among `files` (path -> text) appended, as
    GetScrapeConfigs does, and the key gone: what a Prometheus before 2.43 needs to scrape the same jobs."""
    result = {key: value for key, value in config.items() if key != "scrape_config_files"}
    jobs = list(config.get("scrape_configs", []))
    for pattern in config.get("scrape_config_files", []):
        for path in sorted(p for p in files if fnmatch.fnmatchcase(p, pattern)):
            jobs += yaml.safe_load(files[path])["scrape_configs"]
    names = [job["job_name"] for job in jobs]
    assert len(names) == len(set(names)), names  # GetScrapeConfigs refuses a name twice
    return {**result, "scrape_configs": jobs}


def readable_by(binary: str, uploads: list[dict[str, Any]], config_file: str) -> None:
    """Rewrite the upload of prometheus.yml (`config_file`) as `binary` can read it: as uploaded from 2.43, else
    `inlined` with no per-host job file yet (before the files container's first write the glob matches nothing, so
    the configuration 2.43 starts on is prometheus.yml without the key)."""
    if reads_scrape_config_files(binary):
        return
    upload = next(u for u in uploads if u["file"] == config_file)
    upload["content"] = yaml.safe_dump(inlined(yaml.safe_load(upload["content"]), {}))
