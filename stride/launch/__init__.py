"""Launchers (Slurm sbatch, Kubeflow PyTorchJob) and `repro`: running stride somewhere else, or again."""
