"""Offline tools that `pulumi up` never imports: synth, synth_diff, drift."""
