"""Parallelism applied from outside the model: layout and mesh, DDP/FSDP2, tensor and pipeline parallel
(each as the model's `parallel_plan` declares), and the collective watchdog. The trainer sees `Parallel`."""
