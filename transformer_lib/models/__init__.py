"""Whole models built from the blocks: the three Transformer families, LLaMA, RNNs, MiniLM loaded offline."""
