"""Rules (plain functions) and CrossGuard policies of the rocm-stack policy pack."""
