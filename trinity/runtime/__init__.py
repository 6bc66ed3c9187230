"""Real execution: TensorFlow workers, placed runs, calibration and simulator validation."""
