"""Reinforcement learning workloads: a vectorised market-making environment and PPO."""
