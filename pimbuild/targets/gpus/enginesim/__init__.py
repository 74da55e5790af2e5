"""Serving as an engine runs it: vLLM's scheduler (continuous batching, chunked prefill, paged
KV blocks, preemption) over step times assembled from engine-kernel times, for one GPU
(docs/gpus.md, "Serving as an engine runs it")."""
