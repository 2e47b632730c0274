"""What the training days teach in hindsight: outcome labels of their bars and the retrieval pool built from them.

Shared by fine-tuning (``finetune``: examples and their evaluation) and by every caller that asks the
run's model (``advise``: calibration and collection, through the prompt's retrieved examples), so it
sits below both. See docs/FINETUNE.md (labels) and docs/LLM.md (retrieval).
"""
