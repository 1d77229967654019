"""Batch, stochastic and mini-batch gradient descent; gradient noise vs batch size (notebook 07)."""
