"""The chapters' experiments: one module per experiment, each a seeded training run or measurement that a
chapter calls and shows. Models come from the core modules, training from ``train.train``, figures from ``viz/``.

| chapter | module | what it measures |
| --- | --- | --- |
| 01 | ``sequence_cost`` | operator calls, FLOPs and time of a recurrent loop against attention, by length |
| 01 | ``recall`` | an LSTM and a one-layer GPT recalling the first token after a gap |
| 03 | ``head_count`` | one head vs two and four at the same width on a task that needs two positions at once |
| 03 | ``head_batching`` | all heads in one call vs a loop over heads: latency and peak memory |
| 04 | ``extrapolation`` | positional schemes trained on short sequences, tested on longer ones |
| 05 | ``norm_placement`` | no LayerNorm vs post-norm vs pre-norm on a deep, thin GPT |
| 05 | ``cross_attention`` | what the trained translator's decoder reads in the source |
| 06 | ``causal_leak`` | the leak test, and a GPT trained with and without its causal mask |
| 06 | ``mask_fill`` | ``-1e9`` vs ``-inf`` vs ``finfo.min`` in fp32 / fp16 / bf16 |
| 06 | ``padded_rows`` | padded positions as queries |
| 07 | ``batched_decoding`` | decoding tokens per second against batch size, with its arithmetic intensity |
| 08 | ``pruning_speed`` | forward and decoding speed of pruned models; sparse CSR vs dense products |
| 09 | ``quant_methods`` | RTN vs GPTQ vs AWQ at int4 (GPT perplexity, MiniLM agreement), SmoothQuant, NF4 vs int4 |
| 09 | ``model_memory`` | parameters from a published configuration, weight bytes per format |
"""
