"""The PyTorch programs shipped into the GPU containers (trainer, gpucheck); see programs/train.py for the launch contract."""
