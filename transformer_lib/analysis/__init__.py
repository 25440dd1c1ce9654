"""Reading a trained model: statistics of its attention maps."""
