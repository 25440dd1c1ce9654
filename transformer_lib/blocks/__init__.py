"""The pieces of a Transformer: attention, masks, positions, multi-head attention, layers, norms, experts."""
