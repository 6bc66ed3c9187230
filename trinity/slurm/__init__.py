"""SLURM: checks a sweep runs before it submits anything, and a single-node cluster on this machine (local.py)."""
