"""Domain libraries: GPU topology and placement, Prometheus alert rules, the Grafana dashboard."""
