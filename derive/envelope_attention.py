"""Envelopes of Convolution and the three attentions (being written)."""

MORE_MODELS: dict = {}
