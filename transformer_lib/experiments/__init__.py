"""The chapters' experiments: one module per experiment, each a seeded training run or measurement that a
chapter calls and shows. Models come from the core modules, training from ``train.train``, figures from ``viz/``.

Every module of the folder is listed, with the chapters whose notebooks import it (``tests/test_code_map.py``
checks both against the notebooks; each module's docstring carries the same ``Used in chapter NN.`` line).

| chapters | module | what it measures |
| --- | --- | --- |
| 01 | ``recall`` | an LSTM and a one-layer GPT recalling the first token after a gap |
| 01 | ``sequence_cost`` | operator calls, FLOPs and time of a recurrent loop against attention, by length |
| 01 | ``training_step_cost`` | one training step (forward and backward): recurrent loop vs attention, by length |
| 02 | ``score_scale`` | a fresh layer's raw scores q.k, and its nearly one-hot rows with and without 1/sqrt(d_k) |
| 03 | ``head_batching`` | all heads in one call vs a loop over heads: latency and peak memory |
| 03 | ``head_count`` | one head vs two and four at the same width on a task that needs two positions at once |
| 04 | ``extrapolation`` | positional schemes trained on short sequences, tested on longer ones |
| 05, 06 | ``causal_leak`` | the leak test, and a GPT trained with and without its causal mask |
| 05 | ``cross_attention`` | what the trained translator's decoder reads in the source |
| 05 | ``norm_placement`` | no LayerNorm vs post-norm vs pre-norm on a deep, thin GPT |
| 05 | ``param_shares`` | a layer's parameters split between attention, the feed-forward network and LayerNorm |
| 06 | ``left_padding`` | batched generation of prompts of different lengths, padded on the left |
| 06 | ``mask_conventions`` | one padded batch through three libraries' mask conventions |
| 06 | ``mask_fill`` | ``-1e9`` vs ``-inf`` vs ``finfo.min`` in fp32 / fp16 / bf16 |
| 06 | ``padded_rows`` | padded positions as queries |
| 07 | ``batched_decoding`` | decoding tokens per second against batch size, with its arithmetic intensity |
| 07 | ``prefill_decode`` | the prefill and the decoding steps timed apart, each beside its roofline |
| 08 | ``minilm_pruning`` | which of MiniLM's 72 heads can go, at real scale |
| 08 | ``pruning_speed`` | forward and decoding speed of pruned models; sparse CSR vs dense products |
| 09, 11 | ``model_memory`` | parameters from a published configuration, weight bytes per format |
| 09 | ``quant_methods`` | RTN vs GPTQ vs AWQ at int4 (GPT perplexity, MiniLM agreement), SmoothQuant, NF4 vs int4 |
| 10 | ``attention_wall`` | time and peak memory of attention that materialises the scores, by length; its block share |
| 11 | ``hf_reference`` | Hugging Face LLaMA and Mixtral modules from random configurations, references for chapter 11 |
| 11 | ``moe_vs_dense`` | a dense model and a mixture with the same active parameters trained side by side |
| 12 | ``fine_tuning`` | probe, top layers, LoRA and QLoRA on MiniLM: accuracy, forgetting; the chapter's checkpoint |
| 12 | ``pretraining`` | MLM vs next-token on one tiny model, the same steps: filling a blank vs continuing a line |
| 12 | ``threads`` | a helper, not an experiment: ``torch_threads(n)`` runs a block with ``n`` CPU threads |
"""
