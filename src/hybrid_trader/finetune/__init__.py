"""Learning from trading outcomes: hindsight labels, LoRA fine-tuning of the local LLM and its evaluation.

See docs/FINETUNE.md.
"""
