"""Learned placement: the two-level policy, PPO (Trinity) and REINFORCE (Hierarchical)."""
