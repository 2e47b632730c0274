"""Learning from trading outcomes: hindsight labels, LoRA fine-tuning of the local LLM, its evaluation (docs/FINETUNE.md)."""
