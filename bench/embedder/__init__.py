"""Helpers of bench/train_embedder.py: fine-tune all-MiniLM-L6-v2 for code search and export it as
int8 ONNX for repoctx's LocalMiniLM. Not part of the product: nothing under src/ imports this."""
