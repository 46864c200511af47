"""Training workloads run on the GPU fleet (see workloads/train.py for the program and its launch contract)."""
