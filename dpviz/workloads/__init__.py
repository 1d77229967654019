"""What ranks train: built-in models (mlp, gpt, cnn) or a user's `MODULE:FUNCTION`."""
