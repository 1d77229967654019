"""What a rank's memory holds: parameters, gradients, Adam moments, activations (notebook 09)."""
