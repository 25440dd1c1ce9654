"""Training: the one training loop, the losses, and fine-tuning with LoRA and QLoRA."""
