"""rocm-stack components: one ComponentResource per concern, plus the offline tools (synth, topology, drift)."""
