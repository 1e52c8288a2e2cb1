"""Collective benchmark in the manner of nccl-tests on torch.distributed, and its alpha-beta fit."""
