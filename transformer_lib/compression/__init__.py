"""Making a trained model smaller: pruning heads, layers and weights (quantization is ``quant/``)."""
