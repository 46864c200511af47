"""The Pulumi state a Docker host costs (issue 26): plan.json, the inputs a state holds, per host of the prod shape
and per extra partition, measured as `python -m bench.state` measures it (bench/state.py)."""

from __future__ import annotations

import pytest

from bench import state


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    return state.measure(tmp_path_factory.mktemp("state"), hosts=1, partitions=8)


def test_a_host_of_the_prod_shape_costs_at_most_32_kib(measured):
    assert measured["per_host"] <= state.LIMIT_BYTES, state.line(measured)
    # prod's own hosts, with their training and vLLM containers (programs by reference too): one partition more
    assert max(measured["prod_hosts"].values()) <= state.PROD_HOST_LIMIT_BYTES, state.line(measured)


def test_a_partition_adds_its_containers_not_a_copy_of_the_programs(measured):
    """Eight partitions instead of two: each extra one adds its shell and its GPU check, under 8 KiB together
    (a copy of the check programs alone was 34 KiB)."""
    assert 0 < measured["per_partition"] <= state.PARTITION_LIMIT_BYTES, state.line(measured)


def test_nothing_outside_a_hosts_own_resources_grows_with_the_hosts(measured):
    """The whole file grows by the new hosts' own records and under 1 KiB per host besides (outputs, exporters'
    components): the per-host figure is the file's growth."""
    assert abs(measured["outside_per_host"]) <= 1024, state.line(measured)


def test_the_monitoring_servers_records_do_not_grow_with_the_fleet(measured):
    """Issue 38: the rules, scrape targets and dashboard go by reference (path and SHA-256), so the monitoring
    host's servers hold the same bytes with one generated host as with one more of each shape (they were 0.43 KiB
    more per host), their inputs at most 16 KiB (`python -m bench.state --servers` measures 4, 100 and 1,000
    hosts)."""
    assert measured["monitoring_per_host"] == 0, state.line(measured)
    assert measured["monitoring_inputs"] <= state.SERVERS_LIMIT_BYTES, state.line(measured)


def test_the_monitoring_servers_records_do_not_grow_with_the_keyed_vllm_hosts(tmp_path):
    """Issue 34 item 9: every host that serves the keyed vLLM has a scrape token and a Prometheus job of its own; the
    jobs go by reference (the files container's per-host jobs' file) and the token container gets one secret and the
    hosts' names by reference, so the servers hold the same bytes with 4 such hosts as with 10."""
    found = state.measure_servers(tmp_path, sizes=(6, 12))
    assert found[6] == found[12], found
