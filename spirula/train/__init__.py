"""Training: loss, optimizer (fpbo), densification strategies, the trainer."""
