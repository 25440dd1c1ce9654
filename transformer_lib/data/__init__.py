"""Data and files: tokenizers, the Shakespeare corpus, the dates, pre-training objectives, checkpoint files."""
