"""Mixed precision: FP32/FP16/BF16, loss scaling, autocast (notebook 10)."""
