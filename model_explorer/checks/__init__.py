"""Checks over a whole checkpoint: deep value checks and cross-checkpoint diffs."""
